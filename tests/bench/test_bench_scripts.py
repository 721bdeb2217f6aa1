"""bench/run_collectives_bench.py and bench/plot_busbw.py on RESULT lines made up here, with
the ratios and the best peer worked out by hand. Standard library only (the matplotlib case
runs where matplotlib is installed, e.g. under .venv-peers/bin/python):

    python3 -m unittest discover -s tests/bench -v
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNNER = os.path.join(ROOT, "bench", "run_collectives_bench.py")
PLOT = os.path.join(ROOT, "bench", "plot_busbw.py")


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def result(impl, transport, us, collective="allreduce", ranks=2, size=1 << 20):
    busbw = size / (us * 1e-6) / 1e9
    return (f"RESULT impl={impl} transport={transport} collective={collective} ranks={ranks} "
            f"bytes={size} iterations=10 trials=3 us={us} best_us={us} busbw={busbw:.3f}")


# What the runner wrote before MPICH and oneCCL: ronde, OpenMPI, Gloo and memcpy.
OLD = [result("ronde", "shm", 100), result("mpi", "shm", 150), result("ronde", "tcp", 200),
       result("mpi", "tcp", 300), result("gloo", "tcp", 500),
       "RESULT impl=memcpy transport=- collective=memcpy ranks=1 bytes=1048576 iterations=1 "
       "trials=1 us=50 best_us=50 busbw=20.0"]
NEW = OLD + [result("mpich", "shm", 120), result("oneccl", "shm", 110),
             result("oneccl", "mpi", 130), result("mpich", "tcp", 250),
             result("oneccl", "tcp", 400)]


def table_rows(text, title):
    """The data rows of the table under `### title`, as lists of cells."""
    lines = text.splitlines()
    start = lines.index(f"### {title}")
    header = next(i for i in range(start, len(lines)) if lines[i].startswith("| size"))
    rows = [lines[header].strip("|").split(" | ")]
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    rows[0] = [c.strip() for c in rows[0]]
    return rows


class RunnerFromRaw(unittest.TestCase):
    def lay_out(self, *contents):
        paths = []
        with tempfile.TemporaryDirectory() as tmp:
            for i, lines in enumerate(contents):
                path = os.path.join(tmp, f"round{i}.raw")
                with open(path, "w") as f:
                    f.write("\n".join(lines) + "\n")
                paths.append(path)
            proc = subprocess.run([sys.executable, RUNNER, "--ranks", "2", "--from-raw"] + paths,
                                  capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc.stdout

    def test_old_raw_file_keeps_its_columns(self):
        rows = table_rows(self.lay_out(OLD), "allreduce, 2 ranks")
        self.assertEqual(rows[0], ["size", "ronde shm", "MPI shm", "ratio vs best shm peer",
                                   "ronde tcp", "MPI tcp", "Gloo", "ratio vs best tcp peer",
                                   "memcpy GB/s"])
        row = dict(zip(rows[0], rows[1]))
        self.assertEqual(row["ratio vs best shm peer"], "1.50x (OpenMPI)")  # 150 / 100
        self.assertEqual(row["ratio vs best tcp peer"], "1.50x (OpenMPI)")  # 300 / 200

    def test_ratio_against_the_fastest_peer_of_each_class(self):
        text = self.lay_out(NEW)
        rows = table_rows(text, "allreduce, 2 ranks")
        self.assertEqual(rows[0], ["size", "ronde shm", "MPI shm", "MPICH shm", "oneCCL shm",
                                   "oneCCL mpi", "ratio vs best shm peer", "ronde tcp",
                                   "MPI tcp", "MPICH tcp", "oneCCL tcp", "Gloo",
                                   "ratio vs best tcp peer", "memcpy GB/s"])
        row = dict(zip(rows[0], rows[1]))
        self.assertEqual(row["ratio vs best shm peer"], "1.10x (oneCCL)")  # 110 / 100
        self.assertEqual(row["ratio vs best tcp peer"], "1.25x (MPICH)")  # 250 / 200
        # Issue 15's shm target (1.5x the best shm peer) is missed at 1.10x, its tcp one
        # (1.3x) at 1.25x; "no slower than the best peer" holds.
        self.assertIn("| issue 15: shm, 256 KiB to 16 MiB: ronde >= 1.5x the best shm peer "
                      "| NOT met | **1 MiB: 1.10x** |", text)
        self.assertIn("| issue 15: tcp, 1 to 16 MiB: ronde >= 1.3x the best tcp peer "
                      "| NOT met | **1 MiB: 1.25x** |", text)
        self.assertIn("| every size: ronde (shm) no slower than the best peer | met "
                      "| 1 MiB: 1.10x |", text)

    def test_rounds_take_the_median_of_per_round_ratios(self):
        # Round ratios against the round's fastest shm peer: 150/100, 90/100 (oneCCL that
        # round), 240/120 -> median 1.50x. The named peer is the fastest by median time.
        rounds = [[result("ronde", "shm", 100), result("mpi", "shm", 150),
                   result("oneccl", "shm", 160)],
                  [result("ronde", "shm", 100), result("mpi", "shm", 140),
                   result("oneccl", "shm", 90)],
                  [result("ronde", "shm", 120), result("mpi", "shm", 240),
                   result("oneccl", "shm", 250)]]
        rows = table_rows(self.lay_out(*rounds), "allreduce, 2 ranks")
        row = dict(zip(rows[0], rows[1]))
        self.assertEqual(row["ratio vs best shm peer"], "1.50x (OpenMPI)")


class RunnerCommands(unittest.TestCase):
    def setUp(self):
        self.runner = load(RUNNER, "run_collectives_bench")
        self.tmp = tempfile.TemporaryDirectory()
        peers_dir = self.tmp.name
        for name in ("mpich_bench", "ccl_bench"):
            open(os.path.join(peers_dir, name), "w").close()
        with open(os.path.join(peers_dir, "peers.json"), "w") as f:
            json.dump({"mpich_prefix": "/opt/mpich", "ccl_lib": "/opt/ccl/lib"}, f)
        self.peers = self.runner.load_peers(peers_dir)
        self.args = argparse.Namespace(sizes="1M:1M", trials=1, trial_seconds="0.05",
                                       collectives="allreduce")

    def tearDown(self):
        self.tmp.cleanup()

    def runs(self, ranks=2):
        return {d: (c, e) for d, c, e in self.runner.runs_for(self.args, "/nonexistent", ranks,
                                                              self.peers)}

    def test_no_peers_dir_means_no_new_rows(self):
        self.assertIsNone(self.runner.load_peers(os.path.join(self.tmp.name, "missing")))
        runs = self.runner.runs_for(self.args, "/nonexistent", 2, None)
        self.assertEqual([d for d, _, _ in runs], ["ronde shm", "ronde tcp"])

    def test_mpich_forces_shared_memory_or_tcp(self):
        runs = self.runs()
        shm_command, shm_env = runs["MPICH shm"]
        tcp_command, tcp_env = runs["MPICH tcp"]
        self.assertEqual(shm_command[:5], ["/opt/mpich/bin/mpiexec", "-n", "2", "-bind-to",
                                           "core"])
        self.assertIn("--impl=mpich", shm_command)
        self.assertNotIn("MPIR_CVAR_NOLOCAL", shm_env)
        self.assertEqual(tcp_env["MPIR_CVAR_NOLOCAL"], "1")
        self.assertEqual(tcp_env["FI_PROVIDER"], "tcp")
        self.assertIn("--transport=tcp", tcp_command)

    def test_oneccl_rows_choose_their_transport(self):
        runs = self.runs()
        _, shm_env = runs["oneCCL shm"]
        _, tcp_env = runs["oneCCL tcp"]
        mpi_command, mpi_env = runs["oneCCL mpi"]
        self.assertEqual((shm_env["CCL_ATL_TRANSPORT"], shm_env["CCL_ATL_SHM"],
                          shm_env["FI_PROVIDER"]), ("ofi", "1", "shm"))
        self.assertEqual((tcp_env["CCL_ATL_SHM"], tcp_env["FI_PROVIDER"]), ("0", "tcp"))
        self.assertEqual(shm_env["FI_PROVIDER_PATH"], "/opt/ccl/lib")
        self.assertEqual(mpi_env["CCL_ATL_TRANSPORT"], "mpi")
        self.assertEqual(mpi_env["CCL_MPI_LIBRARY_PATH"], "/opt/mpich/lib/libmpi.so.12")
        self.assertEqual(mpi_command[0], "/opt/mpich/bin/mpiexec")
        self.assertIn(f"--store-dir={self.runner.STORE_DIR}", mpi_command)

    def test_store_dir_is_fresh_for_each_run(self):
        # A program that prints its --store-dir and whether it was empty, as RESULT fields.
        script = ("import os,sys; d=sys.argv[1].split('=',1)[1]; "
                  "print('RESULT impl=probe transport=' + str(len(os.listdir(d))) + ' dir=' + d);"
                  "open(os.path.join(d, 'kvs_address'), 'w').close()")
        seen = []
        for _ in range(2):
            found = self.runner.run_one("probe", [sys.executable, "-c", script,
                                                  f"--store-dir={self.runner.STORE_DIR}"],
                                        30, None)
            self.assertEqual(found[0]["transport"], "0")  # empty when the program started
            self.assertFalse(os.path.exists(found[0]["dir"]))  # removed afterwards
            seen.append(found[0]["dir"])
        self.assertNotEqual(seen[0], seen[1])


class Plot(unittest.TestCase):
    def plot(self, *extra):
        tmp = tempfile.mkdtemp()
        raw = os.path.join(tmp, "run.raw")
        with open(raw, "w") as f:
            f.write("\n".join(NEW + [result("ronde", "shm", 400, size=4 << 20),
                                     result("mpich", "shm", 500, size=4 << 20),
                                     result("ronde", "shm", 100, ranks=4)]) + "\n")
        out = os.path.join(tmp, "plots")
        proc = subprocess.run([sys.executable, PLOT, raw, "--out", out] + list(extra),
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return out, sorted(os.listdir(out))

    def test_plain_svg_one_figure_per_collective_and_ranks(self):
        out, files = self.plot("--plain")
        self.assertEqual(files, ["allreduce_2ranks.svg", "allreduce_4ranks.svg"])
        with open(os.path.join(out, "allreduce_2ranks.svg")) as f:
            svg = f.read()
        for name in ("ronde shm", "MPICH shm", "oneCCL mpi", "OpenMPI tcp", ">Gloo<"):
            self.assertIn(name, svg)
        # Two sizes for MPICH shm: its curve is a polyline through two points.
        self.assertEqual(svg.count("<polyline"), 10)

    @unittest.skipUnless(importlib.util.find_spec("matplotlib"), "matplotlib not installed")
    def test_matplotlib_svg_and_png(self):
        out, files = self.plot()
        self.assertEqual(files, ["allreduce_2ranks.png", "allreduce_2ranks.svg",
                                 "allreduce_4ranks.png", "allreduce_4ranks.svg"])
        with open(os.path.join(out, "allreduce_2ranks.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        with open(os.path.join(out, "allreduce_2ranks.svg")) as f:
            svg = f.read()
        self.assertIn("oneCCL shm", svg)  # svg.fonttype none: legend text stays text


if __name__ == "__main__":
    unittest.main()
