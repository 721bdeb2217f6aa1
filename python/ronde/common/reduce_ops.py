"""The reduction ops and data types every frontend maps its own onto: Horovod's op numbers,
ronde's ReduceOp for each, and ronde's DataType codes by the dtype names that torch, numpy and
TensorFlow share ("float32", "bfloat16", ...). Each frontend builds its dtype table from
DTYPE_CODES with its own dtype objects."""

from ronde import _core

# Reduction ops, as Horovod numbers them.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

# Horovod's op number -> ronde::ReduceOp
CORE_OPS = {Sum: _core.ReduceOp.SUM, Average: _core.ReduceOp.AVERAGE, Min: _core.ReduceOp.MIN,
            Max: _core.ReduceOp.MAX, Product: _core.ReduceOp.PRODUCT,
            Adasum: _core.ReduceOp.ADASUM}

# dtype name -> ronde::DataType code (the extension's own enum, so the two cannot drift apart)
DTYPE_CODES = {name.lower(): int(value) for name, value in _core.DataType.__members__.items()}

_OPS_BY_CODE = {int(core): op for op, core in CORE_OPS.items()}


def op_of_code(code):
    """Horovod's op number for a ronde::ReduceOp code (a graph op's reduce_op attribute)."""
    return _OPS_BY_CODE[int(code)]
