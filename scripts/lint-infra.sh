#!/usr/bin/env bash
# Lints the deployable template and the poller's Dockerfile with pinned tools:
#   cfn-lint  infra/template.yaml      no errors and no warnings
#   checkov   infra/ (CloudFormation + Dockerfile), offline; skips carry reasons in the template
# The IAM wildcard rule is a unit test of outbox-infra (`cargo test -p outbox-infra`).
#
# The linters live in their own virtualenv (.venv-lint) from tools/requirements-lint.txt, installed
# once per machine (a stamp of the requirements' hash, as scripts/emulator.sh does).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv-lint"
REQUIREMENTS="$ROOT/tools/requirements-lint.txt"
PYTHON=${PYTHON:-python3}

die() { echo "lint-infra.sh: $*" >&2; exit 1; }

install() {
  local stamp="$VENV/.requirements.sha256" want
  want=$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)
  if [[ -x "$VENV/bin/checkov" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  command -v "$PYTHON" >/dev/null || die "needs Python 3 ($PYTHON not found)"
  echo "lint-infra.sh: installing pinned linters into $VENV (first run only, a minute or two)" >&2
  "$PYTHON" -m venv "$VENV" || die "could not create $VENV: install Python's venv module"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQUIREMENTS" \
    || die "pip could not install $REQUIREMENTS"
  echo "$want" > "$stamp"
}

install
cd "$ROOT"
echo "lint-infra.sh: cfn-lint infra/template.yaml" >&2
# Warnings fail too (cfn-lint exits non-zero on them by default).
"$VENV/bin/cfn-lint" infra/template.yaml
echo "lint-infra.sh: checkov -d infra" >&2
# --skip-download: offline, no platform calls; findings are judged by the pinned policies only.
"$VENV/bin/checkov" --directory infra --framework cloudformation dockerfile \
  --skip-download --quiet --compact
