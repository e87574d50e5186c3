# Sourced by scripts/emulator.sh: AWS's DynamoDB Local (DynamoDB and DynamoDB Streams), pinned.
#
# AWS publishes DynamoDB Local as a Java archive; the npm package amplify-dynamodb-simulator ships
# it whole (DynamoDBLocal.jar and its native SQLite libraries). The tarball is fetched from the
# npm registry by scripts/npm_fetch.py (Python's standard library; npm itself is not needed),
# checked against the registry's sha512 integrity pinned here, and the jar against its own sha256 pinned here. (The
# `sha256` file inside the package is the checksum of AWS's download archive, not of the jar.)

DDB_LOCAL_NPM_PACKAGE=amplify-dynamodb-simulator
DDB_LOCAL_NPM_VERSION=2.9.30
DDB_LOCAL_NPM_INTEGRITY=sha512-xTeeRLvzEfqyd5lh3bH4c0kHvSHHmmhD5ZDsHFKAQ5g2Zl6JqlFdutaQhCLHzxEp6Ry1o7TB6niIoXuQAnSewQ==
# DynamoDB Local 1.25.1 (its README.txt's release notes).
DDB_LOCAL_JAR_SHA256=454305e9bc3e6ebcca5b62569869e31563b8d7e346474e94557b2600702146c7
# DynamoDB Local 1.x runs on Java 8 or newer; Debian's package when the machine has none.
DDB_LOCAL_DEBIAN_JAVA=openjdk-17-jre-headless

# java_or_install NAME: the java command, installing Debian's JRE when there is none and apt-get
# can run; otherwise exits naming what to install.
java_or_install() {
  local name=$1
  if command -v java >/dev/null 2>&1 && java -version >/dev/null 2>&1; then
    command -v java
    return 0
  fi
  if command -v apt-get >/dev/null 2>&1 && [[ $(id -u) -eq 0 ]]; then
    echo "$name: DynamoDB Local needs Java; installing Debian's $DDB_LOCAL_DEBIAN_JAVA (first run only)" >&2
    if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$DDB_LOCAL_DEBIAN_JAVA" >&2 \
      || { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$DDB_LOCAL_DEBIAN_JAVA" >&2; }; then
      command -v java
      return 0
    fi
  fi
  echo "$name: DynamoDB Local needs Java 8 or newer and none was found. Install a JRE, for example" >&2
  echo "  Debian/Ubuntu: sudo apt-get install $DDB_LOCAL_DEBIAN_JAVA" >&2
  echo "  macOS:         brew install openjdk@17" >&2
  echo "then run the command again." >&2
  exit 1
}

# install_dynamodb_local NAME DIR: DIR/DynamoDBLocal.jar (and DynamoDBLocal_lib), verified, once.
install_dynamodb_local() {
  local name=$1 dir=$2 python=${PYTHON:-python3}
  local stamp="$dir/.jar.sha256"
  if [[ -f "$dir/DynamoDBLocal.jar" && -f "$stamp" && "$(cat "$stamp")" == "$DDB_LOCAL_JAR_SHA256" ]]; then
    return 0
  fi
  echo "$name: installing DynamoDB Local from npm package $DDB_LOCAL_NPM_PACKAGE@$DDB_LOCAL_NPM_VERSION into $dir (first run only)" >&2
  rm -rf "$dir"
  mkdir -p "$dir"
  if ! "$python" "$(dirname "${BASH_SOURCE[0]}")/npm_fetch.py" "$DDB_LOCAL_NPM_PACKAGE" \
    "$DDB_LOCAL_NPM_VERSION" "$DDB_LOCAL_NPM_INTEGRITY" package/emulator/ "$dir" \
    || ! "$python" - "$dir" <<PY
import hashlib, os, sys

jar = os.path.join(sys.argv[1], "DynamoDBLocal.jar")
with open(jar, "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
if digest != "$DDB_LOCAL_JAR_SHA256":
    sys.exit(f"{jar}: sha256 {digest} is not the pinned $DDB_LOCAL_JAR_SHA256")
PY
  then
    rm -rf "$dir"
    echo "$name: could not install DynamoDB Local (message above)" >&2
    exit 1
  fi
  echo "$DDB_LOCAL_JAR_SHA256" > "$stamp"
}
