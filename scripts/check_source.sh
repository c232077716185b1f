#!/usr/bin/env bash
# scripts/check_source.sh — the project's source rules, checked in CI:
#   1. clang-format (.clang-format) is respected;
#   2. no source file is over 400 lines;
#   3. no #include goes up the layer order core <- autograd <- nn <- data <- parallel;
#   4. ThreadLocalState holds exactly the fields listed below: language state a user sets around
#      their code, never one parallel mode's policy (that goes down the layers unseen). A new
#      field is a reviewed decision: add it here, in the same change, and say why;
#   5. README.md is a front page: at most 150 lines (measurements go to bench/RESULTS.md, design
#      notes to docs/).
set -euo pipefail
cd "$(dirname "$0")/.."

mapfile -t files < <(git ls-files -co --exclude-standard -- '*.h' '*.cpp' '*.cu' '*.cuh' | grep -v '^build')
status=0

if ! clang-format --dry-run -Werror "${files[@]}" 2>/tmp/tandem-format.log; then
  echo "check: these files are not clang-formatted (run: clang-format -i <file>):"
  grep -o '^[^:]*:' /tmp/tandem-format.log | sort -u | sed 's/:$//; s/^/  /'
  status=1
fi

for f in "${files[@]}"; do
  n=$(wc -l <"$f")
  if [ "$n" -gt 400 ]; then
    echo "check: $f has $n lines (limit 400): split it by concept"
    status=1
  fi
done

layers=(core autograd nn data parallel)
for i in "${!layers[@]}"; do
  lower=${layers[$i]}
  [ -d "$lower" ] || continue
  for higher in "${layers[@]:$((i + 1))}"; do
    if grep -rnE "#include\s*[<\"]tandem/$higher/" "$lower" --include='*.h' --include='*.cpp' --include='*.cu'; then
      echo "check: $lower/ includes $higher/, which is above it in the layer order"
      status=1
    fi
  done
done

tls_allowed="grad_mode non_blocking_copies saved_tensor_hooks cuda_streams intra_op_threads_cap autocast"
tls_fields=$(sed -n '/^struct ThreadLocalState {/,/^};/p' autograd/thread_local_state.h |
  grep -E '^  [A-Za-z].*;' | grep -vE '^\s*(static|///|//)' |
  sed -E 's/\s*(=[^;]*)?;.*//; s/.*[ *&]//' | xargs)
if [ "$tls_fields" != "$tls_allowed" ]; then
  echo "check: ThreadLocalState's fields are \"$tls_fields\", the reviewed list is \"$tls_allowed\""
  echo "  (a setting one parallel mode needs is an argument, not thread state: scripts/check_source.sh)"
  status=1
fi

readme_lines=$(wc -l <README.md)
if [ "$readme_lines" -gt 150 ]; then
  echo "check: README.md has $readme_lines lines (limit 150): measurements go to bench/RESULTS.md, design to docs/"
  status=1
fi

[ $status -eq 0 ] && echo "check: format, file sizes, layering, thread state and README OK (${#files[@]} files)"
exit $status
