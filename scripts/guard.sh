#!/usr/bin/env bash
# Runs AWS's Guard rules (the Well-Architected security pillar's rule set of
# aws-cloudformation/aws-guard-rules-registry, vendored in infra/guard/, see its README.md) with a
# pinned cfn-guard on the SAM-transformed template (scripts/sam-transform.sh), once per variant:
# the classic bus and the Custom Event Bus (EventBusKind custom).
#
# The default template may fail only the rules infra/guard/known-failures.txt names (each with its
# reason in docs/operations.md, "Security review"): a failure of another rule fails the check, and
# so does a listed rule that now passes (the list says what a review finds, no more).
#
# cfn-guard is the prebuilt binary the npm package @cdklabs/cdk-validator-cfnguard ships (building
# the cfn-guard crate takes minutes on two cores); fetched once per machine with npm, its tarball
# checked against the integrity pinned here, and unpacked into .venv-guard/bin.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GUARD_DIR="$ROOT/.venv-guard"
GUARD="$GUARD_DIR/bin/cfn-guard"
GUARD_PACKAGE=@cdklabs/cdk-validator-cfnguard@0.0.62
GUARD_VERSION="cfn-guard 3.1.1"
GUARD_INTEGRITY=sha512-Sg2k8067B0AIJ82QFSLhHTUIqxOYTKABvVrTHiyc6j0rE2NHli2diIYqf+w+DkuDKCYYgMIOga3OrYMOHUw0mQ==
RULES="$ROOT/infra/guard/wa-security-pillar"
KNOWN_FAILURES="$ROOT/infra/guard/known-failures.txt"

install_cfn_guard() {
  if [[ -x "$GUARD" && "$("$GUARD" --version 2>/dev/null)" == "$GUARD_VERSION" ]]; then
    return 0
  fi
  local arch
  case "$(uname -m)" in
    x86_64 | amd64) arch=x86_64 ;;
    aarch64 | arm64) arch=aarch64 ;;
    *) echo "guard.sh: no prebuilt cfn-guard for $(uname -m) in $GUARD_PACKAGE" >&2; exit 1 ;;
  esac
  if ! command -v npm >/dev/null; then
    echo "guard.sh: needs npm to fetch $GUARD_PACKAGE (Debian: apt-get install npm)" >&2
    exit 1
  fi
  echo "guard.sh: installing $GUARD_VERSION from $GUARD_PACKAGE into $GUARD_DIR (first run only)" >&2
  local work
  work=$(mktemp -d)
  # shellcheck disable=SC2064 # the path is fixed now
  trap "rm -rf '$work'" RETURN
  if ! (cd "$work" && npm pack --silent "$GUARD_PACKAGE" >/dev/null); then
    echo "guard.sh: npm could not fetch $GUARD_PACKAGE" >&2
    exit 1
  fi
  local tarball integrity
  tarball=$(echo "$work"/*.tgz)
  integrity="sha512-$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)"
  if [[ "$integrity" != "$GUARD_INTEGRITY" ]]; then
    echo "guard.sh: $GUARD_PACKAGE's tarball is not the pinned one ($integrity)" >&2
    exit 1
  fi
  tar -xzf "$tarball" -C "$work" "package/bin/ubuntu/$arch/cfn-guard"
  mkdir -p "$GUARD_DIR/bin"
  install -m 0755 "$work/package/bin/ubuntu/$arch/cfn-guard" "$GUARD"
  if [[ "$("$GUARD" --version)" != "$GUARD_VERSION" ]]; then
    echo "guard.sh: $GUARD is not $GUARD_VERSION" >&2
    exit 1
  fi
}

# failed_rules TEMPLATE.json: the names of the rules TEMPLATE fails, one a line, sorted.
failed_rules() {
  local report status=0
  report=$("$GUARD" validate --rules "$RULES" --data "$1" --output-format json --structured \
    --show-summary none) || status=$?
  # 0: every rule passes or is skipped; 19: some rule fails; anything else: Guard could not run.
  if [[ $status -ne 0 && $status -ne 19 ]]; then
    echo "guard.sh: cfn-guard could not evaluate $1 (exit $status)" >&2
    exit 1
  fi
  python3 -c '
import json, sys
names = {r["Rule"]["name"] for f in json.load(sys.stdin) for r in f["not_compliant"]}
print("\n".join(sorted(names)))' <<<"$report"
}

# check VARIANT TEMPLATE.yaml: transforms TEMPLATE and compares what fails with the known failures.
check() {
  local variant=$1 template=$2 transformed want got
  transformed=$("$ROOT/scripts/sam-transform.sh" "$template" "$WORK/$variant.json")
  want=$(grep -v '^#' "$KNOWN_FAILURES" | awk 'NF { print $1 }' | sort)
  got=$(failed_rules "$transformed")
  if [[ "$got" != "$want" ]]; then
    echo "guard.sh: the $variant template's Guard failures are not the known ones:" >&2
    diff <(echo "$want") <(echo "$got") | sed -n 's/^> /  fails, not in known-failures.txt: /p; s/^< /  passes, still in known-failures.txt: /p' >&2
    "$GUARD" validate --rules "$RULES" --data "$transformed" --show-summary fail \
      --output-format single-line-summary >&2 || true
    exit 1
  fi
  echo "guard.sh: $variant: $(grep -c . <<<"$got") known failure(s) of $(find "$RULES" -name '*.guard' | wc -l) rules" >&2
}

install_cfn_guard
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
check classic "$ROOT/infra/template.yaml"
sed '/^  EventBusKind:$/,/^    Default:/ s/^    Default: classic$/    Default: custom/' \
  "$ROOT/infra/template.yaml" > "$WORK/custom.yaml"
if cmp -s "$ROOT/infra/template.yaml" "$WORK/custom.yaml"; then
  echo "guard.sh: could not switch EventBusKind's default to custom" >&2
  exit 1
fi
check custom-bus "$WORK/custom.yaml"
