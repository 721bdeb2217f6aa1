#!/usr/bin/env python3
"""examples/elastic_train_digits.py with a fault-injection seam, for tests/elastic/.

    fault_worker.py --results DIR [--die-in commit|sync --victim wN --at N] -- EXAMPLE ARGS

Runs the example unchanged (runpy), after wrapping two of ronde.torch.elastic's methods:
  * the victim (RONDE_ELASTIC_WORKER_ID == wN) SIGKILLs itself inside `state.commit()`, after
    its local save and before the commit's collective, when the state's step is N
    (--die-in commit); or inside its N-th `sync()`, after the optimizer's state was broadcast
    and before the model's (--die-in sync);
  * every sync that completes prints "elastic: world gen=G rank=R size=S step=K", the
    generation it belongs to, so a test can replay the schedule of worlds;
  * at the end every worker saves its parameters and step to DIR/final-wN.pt.
"""
import argparse
import os
import runpy
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "elastic_train_digits.py")


def die(reason):
    print("elastic: fault %s pid=%d" % (reason, os.getpid()), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", required=True)
    parser.add_argument("--die-in", choices=["commit", "sync"])
    parser.add_argument("--victim", default="")
    parser.add_argument("--at", type=int, default=0)
    args, example_args = parser.parse_known_args()
    if example_args[:1] == ["--"]:
        example_args = example_args[1:]

    from ronde.common import elastic as common_elastic
    from ronde.torch.elastic import state as torch_state

    me = os.environ.get("RONDE_ELASTIC_WORKER_ID", "")
    victim = args.die_in is not None and me == args.victim
    states = []
    syncs = [0]

    original_init = torch_state.TorchState.__init__
    original_check = torch_state.TorchState.check_host_updates
    original_sync = torch_state.TorchState.sync
    original_model_sync = torch_state._ModelHandler.sync

    def init(self, *a, **kw):
        original_init(self, *a, **kw)
        states.append(self)

    def check_host_updates(self):
        # commit() = save(), then this: dying here is dying in the middle of a commit.
        if victim and args.die_in == "commit" and self.step == args.at:
            die("in commit at step %d" % self.step)
        original_check(self)

    def model_sync(self, root):
        # TorchState.sync broadcasts the optimizer's state first, then the model's.
        if victim and args.die_in == "sync" and syncs[0] == args.at:
            die("in sync %d after the optimizer's broadcast" % syncs[0])
        original_model_sync(self, root)

    def sync(self):
        syncs[0] += 1
        original_sync(self)
        import ronde.torch as hvd
        print("elastic: world gen=%d rank=%d size=%d step=%d pid=%d"
              % (common_elastic.driver_view().joined(), hvd.rank(), hvd.size(), self.step,
                 os.getpid()), flush=True)

    torch_state.TorchState.__init__ = init
    torch_state.TorchState.check_host_updates = check_host_updates
    torch_state.TorchState.sync = sync
    torch_state._ModelHandler.sync = model_sync

    sys.argv = [EXAMPLE] + example_args
    code = 0
    try:
        runpy.run_path(EXAMPLE, run_name="__main__")
    except SystemExit as done:
        code = done.code or 0
    import torch
    state = states[-1]
    torch.save({"step": state.step, "epoch": state.epoch,
                "params": {k: v.clone() for k, v in state.model.state_dict().items()}},
               os.path.join(args.results, "final-%s.pt" % me))
    return code


if __name__ == "__main__":
    sys.exit(main())
