#!/usr/bin/env bash
# scripts/sanitize.sh [address,undefined | thread] [--configure-only] — builds the CPU suite with
# clang under sanitizers and runs it.
#   address,undefined (default): build-sanitize/, every CPU test but the examples' smoke runs
#     and the PyTorch round trips (below), the fuzz targets too (same
#     flags plus coverage, so scripts/fuzz.sh reuses this tree). Run by scripts/test.sh in CI.
#   thread: build-tsan/, the tests that start threads or processes (thread pool, DataLoader
#     workers, stores, communicators, DDP, the launcher), with tests/tsan.supp. Also run by
#     scripts/test.sh in CI, so no new thread code regresses it.
# A report fails the test that caused it (UBSan does not recover; ASan and TSan stop the process).
set -euo pipefail
cd "$(dirname "$0")/.."
sanitize=address,undefined configure_only=""
for arg in "$@"; do
  case $arg in
    --configure-only) configure_only=1 ;;
    address,undefined | thread) sanitize=$arg ;;
    *) echo "usage: $0 [address,undefined | thread] [--configure-only]" >&2; exit 2 ;;
  esac
done

# The ASan build leaves out the examples: thin programs over the library, whose smoke runs add
# nothing the unit tests do not run under ASan, for a minute of CI's build.
if [ "$sanitize" = thread ]; then
  dir=build-tsan fuzz=OFF examples=ON
else
  dir=build-sanitize fuzz=ON examples=OFF
fi
# clang: libFuzzer comes with it, and its TSan knows libstdc++'s atomics. CUDA off: the CPU suite
# is what runs here. -O1 keeps the build and the tests quick, and the reports' stacks readable.
CC=clang CXX=clang++ cmake -S . -B $dir -G Ninja -DTANDEM_WITH_CUDA=OFF -DTANDEM_MARCH=x86-64-v3 \
  -DTANDEM_SANITIZE="$sanitize" -DTANDEM_BUILD_FUZZ=$fuzz -DTANDEM_BUILD_EXAMPLES=$examples \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" >/dev/null
[ -n "$configure_only" ] && exit 0
cmake --build $dir

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1
export TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp second_deadlock_stack=1"
if [ "$sanitize" = thread ]; then
  # Tests that start threads (the pool, backward's device threads, DataLoader workers, store
  # servers, Gloo, DDP's reducer, pipeline stages) or processes (spawn, the launcher, the
  # trainer's --ddp smoke run); and the CUDA kernels run on CPU threads (tests/emulated/: a
  # barrier missing from a kernel is a data race there).
  threaded='FlashEmulated|ThreadPool|Spawn|CpuConv2d|DataLoader|Store|Collectives|Broadcast|ProcessGroup|DDP|BucketPlan'
  threaded+='|DeviceThreads|SavedTensor|Offload|Engine|Hooks|Join|DataParallel|ActivationCheckpoint|AutogradGrad|Pipeline'
  threaded+='|Trace|Launch|Subprocess|TrainCommand|BadInput/Distributed|EndToEnd|tools\.|examples\.'
  threaded+='|BlockedTime'  # the time a rank's threads wait on communication (blocked_time.h)
  # Not the trainer's one-process runs that check numbers (a resume's bits, the scaler's state,
  # checkpointing's bits): their threads are the pool's and the loader's, raced here by their own
  # tests, for 45 s of CI.
  single='TrainCommand\.(ResumeIsBitIdentical|AmpTrains|ActivationCheckpointingGivesTheSameBits)'
  # Nor the larger sizes of the collective suites (2 ranks race as 3 and 4 do: 70 s of CI), nor
  # the emulated flash kernels' float16 shapes (their bfloat16 twins take the same barriers).
  single+='|ShmCollectives\.PassTheCollectiveSuiteWithManyRoundsPerTensor/3'
  single+='|ThreadCollectives\.PassTheCollectiveSuite/4|FlashEmulated\..*/fp16_'
  ctest --test-dir $dir --output-on-failure --parallel 2 -R "$threaded" -E "$single"
else
  # Not the PyTorch round trips: their time is PyTorch's import in a Python that ASan does not
  # instrument, and their Tandem side (writing and reading safetensors) runs here in the others.
  # Nor the trainer's resumes checked for identical bits: what they run, the others run here too.
  skipped='^(SafetensorsTorch|GPTMatchesPyTorch)\.|^Checkpoint\.PyTorchLoads'
  skipped+='|ResumeIsBitIdentical|ResumeInTheSameLayoutIsBitIdentical'
  # Nor the trainer's sweeps over every layout of a mode (20 to 37 s each under ASan, 2.5 min of
  # CI): the parallel code they run is run here by the library's equivalence tests
  # (EquivalenceMatrix, PipelinedGPT, ExpertParallel, ring attention), and the trainer itself in
  # a dozen layouts by PlanCommand's and TrainCommand's tests.
  skipped+='|^GptCommand\.(TensorParallelTrainsAsOneDeviceAndResumesAtAnySize'
  skipped+='|ContextParallelTrainsAsOneDeviceUnderEveryLayout|ExpertParallelTrainsAsOneDevice'
  skipped+='UnderEveryLayout|PipelineParallelTrainsAsOneDeviceAndResumesOnAnyLayout'
  skipped+='|EveryPipelineScheduleTrainsAsOneDevice)$'
  # Nor the op table's CUDA cases: this build has no CUDA, so each of the 660 could only skip (as
  # the main build's run shows they do), at a program start each, a minute of CI.
  skipped+='|^OpTable/.*Cuda'
  ctest --test-dir $dir --output-on-failure --parallel 2 -E "$skipped"
fi
