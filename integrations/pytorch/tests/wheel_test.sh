#!/usr/bin/env bash
# The pip package: the wheel that scripts/test.sh builds (`pip wheel --no-build-isolation .`
# into BUILD/dist) is installed into a fresh virtual environment, which then runs the backend's
# suite with nothing but what the wheel installed: `import switchml.torch` without PYTHONPATH,
# and the switch started by the wheel's `switchml` command. Torch is not downloaded again: the
# fresh environment sees the project venv's packages through a .pth file, after its own.
# Usage: wheel_test.sh BUILD_DIR   (exit 77 = skipped: no wheel in BUILD/dist, or no project venv)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/test_lib.sh" "$@"  # BUILD, HERE, PYTHON

pt_skip_unless_imports torch
shopt -s nullglob
wheels=("$BUILD"/dist/switchml-*.whl)
shopt -u nullglob
[[ ${#wheels[@]} -eq 1 ]] || skip "expected one switchml wheel in $BUILD/dist, found ${#wheels[@]} (scripts/test.sh builds it)"
WHEEL=${wheels[0]}

# The wheel's torch requirement (pyproject.toml) admits the pinned torch (requirements.txt).
ROOT=$HERE/../../..
pin=$(sed -n 's/^torch==\([0-9.]*\)$/\1/p' "$ROOT/integrations/pytorch/requirements.txt")
req=$(sed -n 's/^dependencies = \["torch==\([0-9.]*\)\.\*"\]$/\1/p' "$ROOT/pyproject.toml")
[[ -n $pin && -n $req && $pin == "$req".* ]] ||
  fail "pyproject.toml requires torch==${req:-?}.* but requirements.txt pins torch==${pin:-?}"
pass "pyproject.toml's torch==$req.* admits the pinned torch $pin"

sml_work_dir switchml-wheel
sml_deadline 600  # the whole test, whatever hangs
"$PYTHON" -m venv "$WORK/venv"
VPY=$WORK/venv/bin/python
site=$("$VPY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
"$PYTHON" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > "$site/project_venv.pth"
"$VPY" -m pip install --no-index --no-deps --disable-pip-version-check -q "$WHEEL" ||
  fail "pip install $WHEEL into a fresh venv"
pass "installed $(basename "$WHEEL") into a fresh venv"

[[ -x $WORK/venv/bin/switchml ]] || fail "the wheel installed no switchml command"
"$WORK/venv/bin/switchml" --help > "$WORK/help.txt" 2>&1 || { cat "$WORK/help.txt"; fail "switchml --help"; }
pass "the wheel's switchml command runs: $(head -1 "$WORK/help.txt")"

cd "$WORK"  # nothing of the source tree on sys.path
where=$(env -u PYTHONPATH "$VPY" -c '
import switchml, switchml.torch, torch.distributed as dist
assert "switchml" in dist.Backend.backend_list, dist.Backend.backend_list
print(switchml.__file__)') || fail "import switchml.torch from the fresh venv"
[[ $where == "$WORK/venv/"* ]] || fail "switchml was imported from $where, not from the fresh venv"
pass "import switchml.torch registers the backend; the package is the installed one ($where)"

env -u PYTHONPATH "$VPY" "$HERE/test_backend.py" suite --switchml "$WORK/venv/bin/switchml" > "$WORK/suite.log" 2>&1 ||
  { tail -80 "$WORK/suite.log"; fail "the backend suite from the installed wheel"; }
pass "the backend suite passes from the installed wheel ($(grep -c ': ok ' "$WORK/suite.log") checks)"
