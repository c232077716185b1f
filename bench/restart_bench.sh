#!/usr/bin/env bash
# bench/restart_bench.sh — a lost rank and `tandem launch --max-restarts`: 2 DDP ranks train
# EPOCHS epochs (checkpointing after each); during the last epoch rank 1 is killed with SIGKILL.
# The launcher stops the other rank, starts the group again, and the trainer resumes from the
# last checkpoint. Prints how long detection, restart and resume took, and the final accuracy
# beside an uninterrupted run with the same seed (the same, since the kill falls after a
# checkpoint and a resumed run repeats the interrupted epoch exactly).
#   bench/restart_bench.sh [BUILD_DIR]     (DATASET=fashion-mnist MODEL=cnn EPOCHS=2 STEPS=200)
set -euo pipefail
build=${1:-build-bench}
tandem=$build/tools/tandem
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
train=(train --ddp --dataset "${DATASET:-fashion-mnist}" --model "${MODEL:-cnn}"
       --epochs "${EPOCHS:-2}" --max-steps "${STEPS:-200}" --no-progress --seed 1)
now() { date +%s.%N; }

echo "uninterrupted:"
"$tandem" launch --standalone --nproc-per-node 2 -- "$tandem" "${train[@]}" \
  --checkpoint "$work/a" --log-dir "$work/log-a" > "$work/a.txt" 2>&1
grep -E "^\[rank0\]: final" "$work/a.txt"

echo "rank 1 killed during epoch ${EPOCHS:-2}, --max-restarts 1:"
"$tandem" launch --standalone --nproc-per-node 2 --max-restarts 1 -- "$tandem" "${train[@]}" \
  --checkpoint "$work/b" --log-dir "$work/log-b" > "$work/b.txt" 2>&1 &
launcher=$!
last=$((${EPOCHS:-2} - 1))
until grep -q "^\[rank0\]: epoch $last/" "$work/b.txt" 2>/dev/null; do sleep 0.05; done
sleep 0.5  # into the last epoch
victim=""
for p in $(pgrep -f "tandem ${train[0]}"); do
  if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "RANK=1"; then victim=$p; fi
done
killed=$(now)
kill -9 "$victim"
until grep -q "restarting it" "$work/b.txt"; do sleep 0.01; done
detected=$(now)
until grep -q "resuming from the checkpoint" "$work/b.txt"; do sleep 0.01; done
resumed=$(now)
wait $launcher
done_at=$(now)
grep -E "^\[rank0\]: final" "$work/b.txt"
awk -v k="$killed" -v d="$detected" -v r="$resumed" -v e="$done_at" 'BEGIN {
  printf "killed -> group stopped and restart begun: %.2f s\n", d - k
  printf "restart begun -> resuming from the checkpoint: %.2f s\n", r - d
  printf "killed -> finished: %.2f s\n", e - k }'
