#!/usr/bin/env python3
"""Runs an attn-tune sweep over a Ray cluster: one shard per actor, then `attn-tune merge`.

    python3 python/attn_tune_ray.py --workers 8 --device gpu --profile llama-3-8b --out /shared/sweep
    python3 python/attn_tune_ray.py --workers 2 --device cpu --profile quick --out out/ray --threads 1

Each of the --workers actors (`num_gpus=1` with --device gpu, so Ray gives it one GPU and sets its
CUDA_VISIBLE_DEVICES; `num_cpus=--actor-cpus` with --device cpu) runs

    attn-tune sweep --shard I/N --profile P --out DIR/shard-I [--resume]

(--resume when DIR/shard-I already holds results), and streams its progress lines to this driver,
which prints them prefixed with the shard. An actor that dies (its node lost, the process killed)
is replaced by a new one that resumes the shard's folder, up to --max-retries times per shard.
A shard whose sweep ends with faults (configurations that crashed or hung their worker: its
table's measurement_counts.fault) is run again with --resume --retry-faults, as attn-tune itself
advises, up to --fault-retries times (default 1): a fault that a busy node caused goes away, one
that a kernel causes stays in the table.
Once every shard has ended, the driver runs `attn-tune merge DIR DIR/shard-0 ... DIR/shard-(N-1)`,
which writes DIR/results.jsonl and DIR/threshold_table.json (and refuses incomplete shards).

Ray: a local Ray is started on the spot unless --address names a running cluster ("auto" or
"HOST:6379"). On a cluster, DIR must be on storage that every node and the driver see, and
--attn-tune (default: `attn-tune` on PATH, else build/attn-tune beside this file) must name the
binary on every node. Exit status: 0 when the merged table is complete, else the first failing
shard's or merge's.
"""

import argparse
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

# A test hook, as ATTN_TUNE_TEST_FAULTS is attn-tune's: "I:N" kills shard I's actor (ray.kill)
# after its N-th progress line, on its first attempt only, to prove that the shard resumes.
TEST_KILL_ENV = "ATTN_TUNE_RAY_TEST_KILL"
# attn-tune's exit codes (README "Exit codes"): 2 is a usage error no retry can fix.
EXIT_USAGE = 2


def default_attn_tune():
    found = shutil.which("attn-tune")
    if found:
        return found
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(os.path.dirname(here), "build", "attn-tune")


def _die_with_parent():
    # The sweep must not outlive its actor: an orphaned sweep would hold the shard's folder lock
    # and keep timing while the replacement actor resumes the same folder.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def sweep_argv(args, index, count, shard_dir, retry_faults=False):
    argv = [args.attn_tune, "sweep", "--shard", "%d/%d" % (index, count),
            "--profile", args.profile, "--out", shard_dir,
            "--device", "0" if args.device == "gpu" else "cpu"]
    if args.threads is not None:
        argv += ["--threads", str(args.threads)]
    if os.path.exists(os.path.join(shard_dir, "results.jsonl")):
        argv.append("--resume")
        if retry_faults:
            argv.append("--retry-faults")
    return argv + list(args.sweep_arg)


def fault_count(shard_dir):
    """Faults (crashed or hung configurations) in the table the shard's sweep wrote; 0 when it
    wrote none."""
    try:
        with open(os.path.join(shard_dir, "threshold_table.json"), encoding="utf-8") as f:
            return int(json.load(f).get("measurement_counts", {}).get("fault", 0))
    except (OSError, ValueError, AttributeError):
        return 0


class ShardRunner:
    """The actor's body: runs one shard's sweep and yields its output lines, then its exit
    status as {"exit": code}."""

    def run(self, argv):
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        yield {"pid": os.getpid(), "node": os.uname().nodename,
               "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES", "")}
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, preexec_fn=_die_with_parent)
        for raw in proc.stdout:
            # The progress line rewrites itself with '\r' only on a terminal; split anyway.
            for line in raw.decode("utf-8", "replace").replace("\r", "\n").splitlines():
                if line.strip():
                    yield line
        yield {"exit": proc.wait()}


class Driver:
    def __init__(self, ray, args):
        self.ray = ray
        self.args = args
        self.lock = threading.Lock()
        resources = {"num_gpus": 1} if args.device == "gpu" else {"num_cpus": args.actor_cpus}
        self.actor_class = ray.remote(max_restarts=0, **resources)(ShardRunner)
        kill = os.environ.get(TEST_KILL_ENV, "")
        self.kill_shard, self.kill_after = (int(x) for x in kill.split(":")) if kill else (-1, 0)
        self.results = {}

    def say(self, index, text):
        with self.lock:
            print("[shard %d/%d] %s" % (index, self.args.workers, text), flush=True)

    def run_shard(self, index):
        """Runs shard `index` to its end, replacing a dead actor; records its exit status."""
        args, ray = self.args, self.ray
        shard_dir = os.path.join(args.out, "shard-%d" % index)
        attempt = 0
        deaths = 0
        fault_reruns = 0
        while True:
            attempt += 1
            argv = sweep_argv(args, index, args.workers, shard_dir, retry_faults=fault_reruns > 0)
            actor = self.actor_class.remote()
            lines = 0
            rerun = False
            try:
                gen = actor.run.options(num_returns="streaming").remote(argv)
                for ref in gen:
                    item = ray.get(ref)
                    if isinstance(item, dict) and "exit" in item:
                        self.results[index] = item["exit"]
                        self.say(index, "sweep exited with status %d" % item["exit"])
                        ray.kill(actor)
                        # A usage error (2) is not a fault, whatever an earlier table says.
                        faults = fault_count(shard_dir) \
                            if item["exit"] not in (0, EXIT_USAGE) else 0
                        if faults == 0 or fault_reruns >= args.fault_retries:
                            return
                        fault_reruns += 1
                        rerun = True
                        self.say(index, "%d configurations faulted; measuring them again "
                                 "(--resume --retry-faults, rerun %d of %d)"
                                 % (faults, fault_reruns, args.fault_retries))
                        break
                    if isinstance(item, dict):
                        self.say(index, "attempt %d on %s (pid %s, CUDA_VISIBLE_DEVICES=%r): %s"
                                 % (attempt, item["node"], item["pid"],
                                    item["cuda_visible_devices"], " ".join(argv)))
                        continue
                    lines += 1
                    self.say(index, item)
                    if index == self.kill_shard and attempt == 1 and lines == self.kill_after:
                        self.say(index, "test hook %s: killing this shard's actor"
                                 % TEST_KILL_ENV)
                        ray.kill(actor, no_restart=True)
            except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                    ray.exceptions.ObjectLostError) as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                self.say(index, "actor died (%s)" % first)
            if rerun:
                continue
            deaths += 1
            if deaths > args.max_retries:
                self.say(index, "giving up after %d attempts" % attempt)
                self.results[index] = None
                return
            self.say(index, "retrying with a new actor; %s resumes" % shard_dir)
            time.sleep(args.retry_delay)

    def run(self):
        threads = [threading.Thread(target=self.run_shard, args=(i,), daemon=True)
                   for i in range(self.args.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return self.results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--workers", type=int, required=True,
                    help="number of shards and actors (one GPU each with --device gpu)")
    ap.add_argument("--device", choices=("gpu", "cpu"), required=True,
                    help="gpu: one actor per GPU (num_gpus=1); cpu: CPU actors, CPU backend")
    ap.add_argument("--profile", required=True, help="attn-tune profile name or .json path")
    ap.add_argument("--out", required=True,
                    help="output folder: DIR/shard-I per shard, the merged table in DIR")
    ap.add_argument("--attn-tune", default=default_attn_tune(),
                    help="the attn-tune binary on every node (default: %(default)s)")
    ap.add_argument("--address", default=None,
                    help="a running Ray cluster (\"auto\" or HOST:PORT); default: start a local "
                         "Ray here")
    ap.add_argument("--threads", type=int, default=None,
                    help="attn-tune --threads for each sweep (CPU worker threads)")
    ap.add_argument("--actor-cpus", type=float, default=1,
                    help="with --device cpu: CPUs Ray reserves per actor (default: 1)")
    ap.add_argument("--max-retries", type=int, default=3,
                    help="new actors per shard after its actor died (default: 3)")
    ap.add_argument("--fault-retries", type=int, default=1,
                    help="reruns of a shard that ended with faults, with --resume --retry-faults "
                         "(default: 1; 0: leave them in the table)")
    ap.add_argument("--retry-delay", type=float, default=1.0, help=argparse.SUPPRESS)
    ap.add_argument("--sweep-arg", action="append", default=[],
                    help="one more argument for every `attn-tune sweep` (repeatable)")
    ap.add_argument("--partial", action="store_true",
                    help="merge even when a shard did not finish (table marked incomplete)")
    args = ap.parse_args(argv)
    if args.workers < 1:
        ap.error("--workers must be at least 1")
    if args.fault_retries < 0:
        ap.error("--fault-retries must be 0 or more")
    if not os.path.isfile(args.attn_tune) and args.address is None:
        ap.error("--attn-tune %s: no such file (build attn-tune or give its path)"
                 % args.attn_tune)
    args.attn_tune = os.path.abspath(args.attn_tune) if os.path.isfile(args.attn_tune) \
        else args.attn_tune
    args.out = os.path.abspath(args.out)
    os.makedirs(args.out, exist_ok=True)
    try:
        import ray  # noqa: PLC0415 (the argument errors above need no Ray)
    except ImportError:
        print("attn_tune_ray: error: the ray package is not installed for %s "
              "(scripts/install-deps.sh installs it)" % sys.executable, file=sys.stderr)
        return EXIT_USAGE

    if args.address:
        ray.init(address=args.address, log_to_driver=False)
    else:
        # A local Ray with room for every CPU actor, whatever the machine's core count.
        cpus = max(os.cpu_count() or 1, int(args.workers * args.actor_cpus + 0.999))
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    if args.device == "gpu":
        gpus = int(ray.cluster_resources().get("GPU", 0))
        if gpus < args.workers:
            print("attn_tune_ray: note: the cluster has %d GPUs for %d workers; shards wait for "
                  "a free GPU" % (gpus, args.workers), flush=True)
    started = time.time()
    results = Driver(ray, args).run()
    ray.shutdown()
    print("attn_tune_ray: shards ended in %.1f s: %s" % (
        time.time() - started,
        ", ".join("%d: %s" % (i, "gave up" if results.get(i) is None else "exit %d" % results[i])
                  for i in range(args.workers))), flush=True)
    if any(results.get(i) == EXIT_USAGE for i in range(args.workers)):
        return EXIT_USAGE
    merge = [args.attn_tune, "merge", args.out] + \
        [os.path.join(args.out, "shard-%d" % i) for i in range(args.workers)]
    if args.partial:
        merge.append("--partial")
    print("attn_tune_ray: " + " ".join(merge), flush=True)
    rc = subprocess.call(merge)
    if rc != 0:
        return rc
    bad = [results.get(i) for i in range(args.workers) if results.get(i) != 0]
    return next((b for b in bad if b is not None), 4 if bad else 0)


if __name__ == "__main__":
    sys.exit(main())
