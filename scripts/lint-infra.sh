#!/usr/bin/env bash
# Lints the deployable template and the poller's Dockerfile with pinned tools:
#   cfn-lint  infra/template.yaml      no errors and no warnings
#   checkov   infra/ (CloudFormation + Dockerfile), offline; skips carry reasons in the template;
#             again with EventBusKind=custom, with the example consumer on an SQS target, and
#             with a global table (checkov scans only the default parameters' resources)
#   aws-sam-translator: the template transformed as CloudFormation will (scripts/sam-transform.sh),
#             and cfn-lint on the transformed template too; the infra tests of outbox-tests check it
# The IAM wildcard rule is a unit test of outbox-infra (`cargo test -p outbox-infra`).
#
# The linters live in their own virtualenv (.venv-lint) from tools/requirements-lint.txt, installed
# once per machine (scripts/pinned-venv.sh).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv-lint"
REQUIREMENTS="$ROOT/tools/requirements-lint.txt"
PYTHON=${PYTHON:-python3}


# shellcheck source=scripts/pinned-venv.sh
source "$ROOT/scripts/pinned-venv.sh"

install() { install_pinned_venv lint-infra.sh "$VENV" "$REQUIREMENTS" checkov; }

install
cd "$ROOT"
echo "lint-infra.sh: cfn-lint infra/template.yaml" >&2
# Warnings fail too (cfn-lint exits non-zero on them by default).
"$VENV/bin/cfn-lint" infra/template.yaml
echo "lint-infra.sh: checkov -d infra" >&2
# --skip-download: offline, no platform calls; findings are judged by the pinned policies only.
"$VENV/bin/checkov" --directory infra --framework cloudformation dockerfile \
  --skip-download --quiet --compact
# checkov drops the resources whose Condition is false for the parameters' defaults, so the
# Custom Event Bus resources (EventBusKind custom) get a pass of their own, on a copy of the
# template whose EventBusKind defaults to custom. (cfn-lint checks every condition's branch.)
CUSTOM_DIR=$(mktemp -d)
trap 'rm -rf "$CUSTOM_DIR"' EXIT
sed '/^  EventBusKind:$/,/^    Default:/ s/^    Default: classic$/    Default: custom/' \
  infra/template.yaml > "$CUSTOM_DIR/template.yaml"
if cmp -s infra/template.yaml "$CUSTOM_DIR/template.yaml"; then
  echo "lint-infra.sh: could not switch EventBusKind's default to custom" >&2
  exit 1
fi
echo "lint-infra.sh: checkov on infra/template.yaml with EventBusKind=custom" >&2
"$VENV/bin/checkov" --directory "$CUSTOM_DIR" --framework cloudformation \
  --skip-download --quiet --compact
# And the example consumer (DeployExampleConsumer, off by default) on an SQS target, its pass too.
CONSUMER_DIR="$CUSTOM_DIR/consumer"
mkdir "$CONSUMER_DIR"
sed -e '/^  EventTargetKind:$/,/^    Default:/ s/^    Default: bus$/    Default: sqs/' \
  -e '/^  EventTarget:$/,/^    Default:/ s/^    Default: ""$/    Default: arn:aws:sqs:us-east-1:123456789012:orders/' \
  -e '/^  DeployExampleConsumer:$/,/^    Default:/ s/^    Default: "false"$/    Default: "true"/' \
  infra/template.yaml > "$CONSUMER_DIR/template.yaml"
if [ "$(diff infra/template.yaml "$CONSUMER_DIR/template.yaml" | grep -c '^>')" -ne 3 ]; then
  echo "lint-infra.sh: could not switch the defaults to the example consumer on an SQS target" >&2
  exit 1
fi
echo "lint-infra.sh: checkov on infra/template.yaml with the example consumer on an SQS target" >&2
"$VENV/bin/checkov" --directory "$CONSUMER_DIR" --framework cloudformation \
  --skip-download --quiet --compact
# And the global-table option (GlobalTableRegions, off by default) in the stack that creates the
# outbox and lease tables as global tables, its pass too.
GLOBAL_DIR="$CUSTOM_DIR/global"
mkdir "$GLOBAL_DIR"
sed -e '/^  GlobalTableRegions:$/,/^    Default:/ s/^    Default: ""$/    Default: us-east-1,eu-west-1/' \
  -e '/^  GlobalTableName:$/,/^    Default:/ s/^    Default: ""$/    Default: orders/' \
  infra/template.yaml > "$GLOBAL_DIR/template.yaml"
if [ "$(diff infra/template.yaml "$GLOBAL_DIR/template.yaml" | grep -c '^>')" -ne 2 ]; then
  echo "lint-infra.sh: could not switch the defaults to a global table" >&2
  exit 1
fi
echo "lint-infra.sh: checkov on infra/template.yaml with a global table (GlobalTableRegions)" >&2
"$VENV/bin/checkov" --directory "$GLOBAL_DIR" --framework cloudformation \
  --skip-download --quiet --compact
echo "lint-infra.sh: aws-sam-translator, then cfn-lint on its output" >&2
TRANSFORMED=$("$ROOT/scripts/sam-transform.sh")
"$VENV/bin/cfn-lint" "$TRANSFORMED"
