"""How the callbacks read and write Keras 3 state, on any backend (see callback_impl)."""

import keras
import numpy as np


class Keras3Access:
    def is_variable(self, value):
        return isinstance(value, keras.Variable)

    def read(self, variables):
        return [np.asarray(keras.ops.convert_to_numpy(v.value)) for v in variables]

    def assign(self, variables, values):
        for variable, value in zip(variables, values):
            variable.assign(value)

    def model_variables(self, model):
        return list(model.variables)

    def optimizer_variables(self, optimizer):
        return list(optimizer.variables)

    def learning_rate(self, optimizer):
        return float(keras.ops.convert_to_numpy(optimizer.learning_rate))

    def set_learning_rate(self, optimizer, value):
        optimizer.learning_rate = value

    def momentum_is_variable(self, optimizer):
        # Keras 3 optimizers keep momentum as a Python number, compiled into the train step.
        return isinstance(getattr(optimizer, "momentum", None), keras.Variable)

    def momentum(self, optimizer):
        return float(keras.ops.convert_to_numpy(optimizer.momentum))

    def set_momentum(self, optimizer, value):
        optimizer.momentum.assign(value)


KERAS3 = Keras3Access()
