#!/usr/bin/env bash
# Transforms infra/template.yaml with the pinned aws-sam-translator (the AWS::Serverless transform
# CloudFormation applies at deploy time) into target/sam/template.json, the template as
# CloudFormation and Lambda will see it; the infra tests of outbox-tests read it (they run this
# script, so `make test` and `cargo test` do it on a fresh clone). No AWS account: the transform
# runs offline, and nothing in the template needs its managed-policy lookup.
#
#   scripts/sam-transform.sh            prints the path of the transformed template
#
# The translator lives in the linters' virtualenv (.venv-lint, tools/requirements-lint.txt).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv-lint"
REQUIREMENTS="$ROOT/tools/requirements-lint.txt"
OUT_DIR="${CARGO_TARGET_DIR:-$ROOT/target}/sam"
OUT="$OUT_DIR/template.json"

# shellcheck source=scripts/pinned-venv.sh
source "$ROOT/scripts/pinned-venv.sh"
install_pinned_venv sam-transform.sh "$VENV" "$REQUIREMENTS" checkov >&2

mkdir -p "$OUT_DIR"
# The transform names the partition from the region; any commercial region gives `aws`.
AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-us-east-1} \
  "$VENV/bin/python" - "$ROOT/infra/template.yaml" "$OUT.tmp" <<'PY'
import json, sys
from cfnlint.decode import decode
from samtranslator.translator.transform import transform

class NoManagedPolicies:
    """The template names no AWS managed policy by name (roles are its own), so none is looked up."""
    def load(self):
        return {}

template, matches = decode(sys.argv[1])
if matches:
    sys.exit("sam-transform.sh: the template does not parse: " + "; ".join(str(m) for m in matches))
# What `sam deploy` does first: upload each function's local package and name its S3 location.
for resource in template["Resources"].values():
    if resource["Type"] == "AWS::Serverless::Function":
        code = resource["Properties"]["CodeUri"]
        if not str(code).startswith("s3://"):
            # <function>/bootstrap.zip, as make lambda-zip packages it
            resource["Properties"]["CodeUri"] = "s3://sam-deploy-uploads/" + "/".join(str(code).split("/")[-2:])
transformed = transform(template, {}, NoManagedPolicies())
with open(sys.argv[2], "w") as out:
    json.dump(transformed, out, indent=1, sort_keys=True)
PY
mv "$OUT.tmp" "$OUT"
echo "$OUT"
