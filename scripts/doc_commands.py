#!/usr/bin/env python3
"""scripts/doc_commands.py TANDEM DOC... — runs every `tandem` command the documentation shows, as
written, with TANDEM_DRY_RUN=1: each checks its flags as a real run would and exits before any work
(tools/commands.h). A command a reader copies must not be refused (README once showed
`tandem train --pipeline cpu:0,cpu:1 --chunks 8`, which the default model cnn-bn refuses).

Checked: each line of a ```sh or ```bash block that starts with `tandem`, `mpirun` or `srun`
(backslash continuations joined, `# comments` dropped), and each inline `tandem ...` span that
names no placeholder (N, DIR, a|b, [optional], ...: those describe, they are not commands) and
is more than a subcommand's name (`tandem launch`).
`mpirun -np N` runs as written (as root, with Open MPI's consent variables); `srun CMD` runs CMD
once with Slurm's variables for rank 0 of 2, as srun would set them. `tandem` is TANDEM (the
built binary). Commands run in a temporary directory, so relative paths write nothing here."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

NAMES = {"tandem launch", "tandem generate", "tandem fetch"}
PLACEHOLDER = re.compile(r"\||\[|\.\.\.|…|\b[A-Z]{1,4}\b|\./")


def commands(path):
    """(line number, command) of each checked command in `path`."""
    block, pending, start = None, "", 0
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if block is None:
                if re.fullmatch(r"```(sh|bash)\s*", line):
                    block = True
                    continue
                for span in re.findall(r"`(tandem [^`]*)`", line):
                    # `tandem launch` alone names the subcommand; it is no command to run.
                    if span in NAMES or PLACEHOLDER.search(span[len("tandem "):]):
                        continue
                    yield number, span
                continue
            if line.startswith("```"):
                block = None
                continue
            text = re.sub(r"\s+#.*$", "", line).strip()
            if not pending:
                start = number
            if text.endswith("\\"):
                pending += text[:-1] + " "
                continue
            text, pending = pending + text, ""
            if re.match(r"(tandem|mpirun|srun)\s", text):
                yield start, text


def run(tandem, command, workdir):
    env = dict(os.environ, TANDEM_DRY_RUN="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    env["PATH"] = os.path.dirname(tandem) + os.pathsep + env["PATH"]
    if command.startswith("srun "):
        command = command[len("srun "):]
        env.update(SLURM_PROCID="0", SLURM_NTASKS="2", SLURM_LOCALID="0", SLURM_JOB_ID="7",
                   SLURM_NTASKS_PER_NODE="2", SLURM_JOB_NODELIST="localhost")
    if command.startswith("mpirun") and shutil.which("mpirun") is None:
        return None, "mpirun is not installed"
    done = subprocess.run(["bash", "-c", command], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


def main(tandem, docs):
    tandem = os.path.abspath(tandem)
    checked, failed = 0, []
    with tempfile.TemporaryDirectory(prefix="tandem-doc-commands-") as workdir:
        for doc in docs:
            for number, command in commands(doc):
                code, output = run(tandem, command, workdir)
                if code is None:
                    print(f"skipped {doc}:{number}: {command} ({output})")
                    continue
                checked += 1
                if code != 0:
                    failed.append(f"{doc}:{number}: {command}\n  exit {code}:\n  " +
                                  output.strip().replace("\n", "\n  "))
    for f in failed:
        print("FAILED " + f)
    print(f"doc commands: {checked - len(failed)} of {checked} pass as written")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2:]))
