#!/usr/bin/env bash
# Runs AWS's Guard rules (the Well-Architected security pillar's rule set of
# aws-cloudformation/aws-guard-rules-registry, vendored in infra/guard/, see its README.md) with a
# pinned cfn-guard on the SAM-transformed template (scripts/sam-transform.sh), once per variant:
# the classic bus and the Custom Event Bus (EventBusKind custom), each with the hardened option off
# (the default) and on (Hardened true), and the global-table option (GlobalTableRegions), off and on.
#
# Guard does not evaluate conditions (a property under `Fn::If` exists for it whichever branch
# CloudFormation takes), so each variant is first decided for its parameters as CloudFormation
# deploys it: resources whose condition is false dropped, each `Fn::If` its branch,
# `AWS::NoValue` removed, a parameter's `Ref` its value.
#
# The default template may fail only the rules infra/guard/known-failures.txt names (each with its
# reason in docs/operations.md, "Security review"): a failure of another rule fails the check, and
# so does a listed rule that now passes (the list says what a review finds, no more). With the
# hardened option every rule passes.
#
# cfn-guard is the prebuilt binary the npm package @cdklabs/cdk-validator-cfnguard ships (building
# the cfn-guard crate takes minutes on two cores); fetched once per machine from the npm registry
# by scripts/npm_fetch.py (Python's standard library; npm itself is not needed), its tarball
# checked against the integrity pinned here, and unpacked into .venv-guard/bin.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GUARD_DIR="$ROOT/.venv-guard"
GUARD="$GUARD_DIR/bin/cfn-guard"
GUARD_PACKAGE=@cdklabs/cdk-validator-cfnguard
GUARD_PACKAGE_VERSION=0.0.62
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
  echo "guard.sh: installing $GUARD_VERSION from $GUARD_PACKAGE@$GUARD_PACKAGE_VERSION into $GUARD_DIR (first run only)" >&2
  rm -rf "$GUARD_DIR"
  if ! python3 "$ROOT/scripts/npm_fetch.py" "$GUARD_PACKAGE" "$GUARD_PACKAGE_VERSION" \
    "$GUARD_INTEGRITY" "package/bin/ubuntu/$arch/" "$GUARD_DIR/bin"; then
    echo "guard.sh: could not install cfn-guard (message above)" >&2
    exit 1
  fi
  chmod 0755 "$GUARD"
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

# decide TRANSFORMED.json OUT.json NAME=VALUE...: TRANSFORMED as CloudFormation deploys it with
# these parameters (the others at their defaults).
decide() {
  python3 - "$@" <<'PY'
import json, re, sys

template = json.load(open(sys.argv[1]))
given = dict(arg.split("=", 1) for arg in sys.argv[3:])
parameters = {}
for name, spec in template.get("Parameters", {}).items():
    value = given.pop(name, spec.get("Default"))
    if value is None:
        sys.exit(f"guard.sh: parameter {name} has no default: give it a value")
    if spec["Type"] == "Number":
        value = int(value)
    elif spec["Type"].startswith("List<") or spec["Type"] == "CommaDelimitedList":
        value = [v for v in str(value).split(",") if v]
    parameters[name] = value
if given:
    sys.exit(f"guard.sh: no such parameter: {', '.join(given)}")
NO_VALUE = object()

def ref(name):
    return parameters.get(name, {"Ref": name})

conditions = template.get("Conditions", {})
decided = {}
def condition(name):
    if name not in decided:
        decided[name] = holds(conditions[name])
    return decided[name]

def compared(value):
    """A value in Fn::Equals: resolved, and a Fn::Select of a Fn::Split of a Fn::Sub of
    parameters (the global tables' region slots) evaluated."""
    if isinstance(value, dict) and set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
        def parameter(match):
            if match.group(1) not in parameters:
                sys.exit(f"guard.sh: a Fn::Sub in a condition names {match.group(1)}, not a parameter")
            return str(parameters[match.group(1)])
        return re.sub(r"\$\{([A-Za-z0-9]+)\}", parameter, value["Fn::Sub"])
    if isinstance(value, dict) and set(value) == {"Fn::Split"}:
        delimiter, text = (compared(v) for v in value["Fn::Split"])
        return text.split(delimiter)
    if isinstance(value, dict) and set(value) == {"Fn::Select"}:
        index, items = value["Fn::Select"]
        return compared(items)[int(compared(index))]
    return resolve(value)

def holds(expression):
    (function, args), = expression.items()
    if function == "Fn::Equals":
        a, b = (compared(arg) for arg in args)
        return str(a) == str(b)
    if function == "Fn::Not":
        return not holds(args[0])
    if function == "Fn::And":
        return all(holds(arg) for arg in args)
    if function == "Fn::Or":
        return any(holds(arg) for arg in args)
    if function == "Condition":
        return condition(args)
    sys.exit(f"guard.sh: a condition function this script does not decide: {function}")

def resolve(value):
    if isinstance(value, dict):
        if set(value) == {"Fn::If"}:
            name, then, otherwise = value["Fn::If"]
            return resolve(then if condition(name) else otherwise)
        if set(value) == {"Ref"}:
            return NO_VALUE if value["Ref"] == "AWS::NoValue" else ref(value["Ref"])
        if set(value) == {"Condition"} and isinstance(value["Condition"], str):
            return condition(value["Condition"])
        out = {k: resolve(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not NO_VALUE}
    if isinstance(value, list):
        return [v for v in (resolve(v) for v in value) if v is not NO_VALUE]
    return value

resources = {}
for logical_id, resource in template["Resources"].items():
    if "Condition" in resource and not condition(resource["Condition"]):
        continue
    resources[logical_id] = resolve(resource)
template["Resources"] = resources
json.dump(template, open(sys.argv[2], "w"), indent=1)
PY
}

# check VARIANT WANT PARAMETERS...: decides the transformed template for the variant's parameters
# and compares what fails with WANT (a file of rule names, one a line; comments and blanks aside).
check() {
  local variant=$1 want_file=$2 want got
  shift 2
  decide "$TRANSFORMED" "$WORK/$variant.json" "${PLACEHOLDERS[@]}" "$@"
  want=$(awk '!/^#/ && NF { print $1 }' "$want_file" | sort)
  got=$(failed_rules "$WORK/$variant.json")
  if [[ "$got" != "$want" ]]; then
    echo "guard.sh: the $variant template's Guard failures are not the expected ones ($want_file):" >&2
    diff <(echo "$want") <(echo "$got") | sed -n 's/^> /  fails, not expected: /p; s/^< /  passes, still listed: /p' >&2
    "$GUARD" validate --rules "$RULES" --data "$WORK/$variant.json" --show-summary fail \
      --output-format single-line-summary >&2 || true
    exit 1
  fi
  echo "guard.sh: $variant: $(grep -c . <<<"$got") failure(s) of $(find "$RULES" -name '*.guard' | wc -l) rules, as expected" >&2
}

install_cfn_guard
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
TRANSFORMED=$("$ROOT/scripts/sam-transform.sh")
# The parameters without a default: any values of their types.
PLACEHOLDERS=(VpcId=vpc-0123456789abcdef0 SubnetIds=subnet-0123456789abcdef0,subnet-0123456789abcdef1
  PollerImageTag=0123456789ab)
NONE="$WORK/none"
: > "$NONE"
check classic "$KNOWN_FAILURES"
check custom-bus "$KNOWN_FAILURES" EventBusKind=custom
# Hardened, with an alarm topic (CLOUDWATCH_ALARM_ACTION_CHECK: an alarm notifies someone), on
# each bus kind and with the example consumer on an SQS target.
HARDENED=(Hardened=true AlarmTopicArn=arn:aws:sns:us-east-1:123456789012:alarms
  PrivateRouteTableIds=rtb-0123456789abcdef0)
check classic-hardened "$NONE" "${HARDENED[@]}"
check custom-bus-hardened "$NONE" "${HARDENED[@]}" EventBusKind=custom
check consumer-hardened "$NONE" "${HARDENED[@]}" EventTargetKind=sqs \
  EventTarget=arn:aws:sqs:us-east-1:123456789012:orders DeployExampleConsumer=true
# The global-table option, in the stack that creates the outbox and lease tables as global
# tables (GlobalTableRegions), and hardened with a multi-Region key. The vendored rules check
# AWS::DynamoDB::Table only, so DYNAMODB_TABLE_ENCRYPTED_KMS finds no table and passes there: the
# global tables' encryption per replica is checked by the template tests (outbox-tests, infra).
GLOBAL=(GlobalTableRegions=us-east-1,eu-west-1,ap-south-1 GlobalTableName=orders)
grep -v '^DYNAMODB_TABLE_ENCRYPTED_KMS' "$KNOWN_FAILURES" > "$WORK/known-failures-global"
check global "$WORK/known-failures-global" "${GLOBAL[@]}"
check global-hardened "$NONE" "${HARDENED[@]}" "${GLOBAL[@]}" \
  HardenedKmsKeyArn=arn:aws:kms:us-east-1:123456789012:key/mrk-1234abcd12ab34cd56ef1234567890ab
