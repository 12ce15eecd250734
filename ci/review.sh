#!/usr/bin/env bash
# The review job that .github/workflows/gpu-stack.yml and .gitlab-ci.yml run, one verb per CI step (docs/ci.md):
#   ci/review.sh check          check every stack: review/gpustack.sarif for code scanning, its exit code kept
#   ci/review.sh plan BASE_REF  every stack's `gpustack diff` against BASE_REF as markdown: review/plans/<stack>.md
#   ci/review.sh verdict        exit 1 if the check or a plan found what must stop the merge, with the reason
# GPUSTACK_LABELS: the pull request's labels, comma-separated; each `gpu-stack-allow:<rule>` accepts that danger
# (`gpustack diff --allow <rule>`) once a reviewer has looked. GPUSTACK_STACKS limits the stacks (default: all).
# Each verb exits 0 after recording its result, so the steps after it (upload, comment) still run.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
OUT=${GPUSTACK_REVIEW_DIR:-review}

stacks() {
  if [ -n "${GPUSTACK_STACKS:-}" ]; then
    tr -s ', ' '\n' <<<"$GPUSTACK_STACKS" | sed '/^$/d'
    return
  fi
  for file in stacks/Pulumi.*.yaml; do
    name=${file#stacks/Pulumi.}
    echo "${name%.yaml}"
  done
}

allowed() {
  tr ',' '\n' <<<"${GPUSTACK_LABELS:-}" | sed -n 's/^ *gpu-stack-allow:\([a-z-]*\) *$/\1/p'
}

check() {
  mkdir -p "$OUT"
  local args=() code=0 stack
  while read -r stack; do args+=(--stack "$stack"); done < <(stacks)
  "$PYTHON" -m gpustack check "${args[@]}" --format sarif >"$OUT/gpustack.sarif" || code=$?
  echo "$code" >"$OUT/check.exit"
  echo "check: exit $code ($OUT/gpustack.sarif)"
}

plan() {
  local base=${1:?usage: ci/review.sh plan BASE_REF} worst=0 code stack rule
  local allow=()
  while read -r rule; do allow+=(--allow "$rule"); done < <(allowed)
  mkdir -p "$OUT/plans"
  while read -r stack; do
    code=0
    "$PYTHON" -m gpustack diff --stack "$stack" --base "$base" --format markdown "${allow[@]}" \
      >"$OUT/plans/$stack.md" || code=$?
    # exit 2 (the stack or its base does not render) leaves no body worth a comment: the log has the one line
    [ -s "$OUT/plans/$stack.md" ] || rm -f "$OUT/plans/$stack.md"
    [ "$code" -gt "$worst" ] && worst=$code
    echo "plan $stack: exit $code"
  done < <(stacks)
  echo "$worst" >"$OUT/plan.exit"
}

verdict() {
  local check plan
  check=$(cat "$OUT/check.exit" 2>/dev/null || echo missing)
  plan=$(cat "$OUT/plan.exit" 2>/dev/null || echo 0)
  case "$check" in
    0) ;;
    1) echo "gpu-stack: a mandatory policy is violated, or an object fails validation (see the code-scanning annotations)"; return 1 ;;
    2) echo "gpu-stack: a stack file or its configuration is invalid (see the annotations and the check step's log)"; return 1 ;;
    *) echo "gpu-stack: the check did not finish (exit $check)"; return 1 ;;
  esac
  case "$plan" in
    0) echo "gpu-stack: every stack checks clean and every plan is safe" ;;
    1) echo "gpu-stack: a plan is dangerous; after review, label the PR gpu-stack-allow:<rule> to accept it"; return 1 ;;
    *) echo "gpu-stack: a stack or its base branch does not render (exit $plan; see the plan step's log)"; return 1 ;;
  esac
}

case "${1:-}" in
  check) check ;;
  plan) shift; plan "$@" ;;
  verdict) verdict ;;
  *) echo "usage: ci/review.sh check | plan BASE_REF | verdict" >&2; exit 2 ;;
esac
