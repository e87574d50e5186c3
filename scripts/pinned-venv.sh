# Sourced by the scripts that need pinned Python tools (emulator.sh, lint-infra.sh).
#
# install_pinned_venv NAME VENV REQUIREMENTS TOOL
#   Creates VENV and installs REQUIREMENTS (a full pip freeze) into it, once per machine: a stamp of
#   the requirements' hash skips the work while VENV/bin/TOOL exists and the pins are unchanged.
#   NAME prefixes the messages. Exits with a message naming what is missing on failure.
install_pinned_venv() {
  local name=$1 venv=$2 requirements=$3 tool=$4
  local python=${PYTHON:-python3} stamp="$2/.requirements.sha256" want
  want=$(sha256sum "$requirements" | cut -d' ' -f1)
  if [[ -x "$venv/bin/$tool" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  if ! command -v "$python" >/dev/null; then
    echo "$name: needs Python 3 ($python not found)" >&2
    exit 1
  fi
  echo "$name: installing the pinned tools of $(basename "$requirements") into $venv (first run only)" >&2
  if ! "$python" -m venv "$venv"; then
    echo "$name: could not create $venv: install Python's venv module (Debian: apt-get install python3-venv)" >&2
    exit 1
  fi
  if ! "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"; then
    echo "$name: pip could not install $requirements" >&2
    exit 1
  fi
  echo "$want" > "$stamp"
}
