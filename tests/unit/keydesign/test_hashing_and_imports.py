"""The stable hash never changes, in any process; importing the layer pulls in no AWS SDK."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from keydesign import shard_of, stable_hash

FUNCTIONS_DIR = Path(__file__).resolve().parents[3] / "functions"

# stable_hash(s) = first 8 bytes of SHA-256(UTF-8 s), big-endian. Derivation,
# independently of the package: hashlib.sha256(s.encode()).hexdigest()[:16] is
#   ""                  e3b0c44298fc1c14  (the well-known SHA-256 of nothing: e3b0c442 98fc1c14 9afbf4c8...)
#   "a"                 ca978112ca1bbdca  (the well-known SHA-256 of "a": ca978112 ca1bbdca fac231b3...)
#   "sensor-alpha-001"  abbc551296c96d3d
#   "sensor-0001"       5622a4f65ad1ec6d
#   "hot-1"             753bec0d9e1ff4a2
#   "ümlaut"            e30af24e0a2fbccc  (UTF-8: c3 bc ...)
#   "ev-42"             69011492aec3b8cf
# and int(hex, 16) gives the integers below; the shards are those integers mod 16, 100, 7.
KNOWN = [
    # text, stable_hash, shard mod 16, mod 100, mod 7
    ("", 16406829232824261652, 4, 52, 1),
    ("a", 14598278634844962250, 10, 50, 4),
    ("sensor-alpha-001", 12374859414434835773, 13, 73, 0),
    ("sensor-0001", 6206704614462581869, 13, 69, 3),
    ("hot-1", 8447605069295121570, 2, 70, 1),
    ("ümlaut", 16360155013369019596, 12, 96, 2),
    ("ev-42", 7566351469188987087, 15, 87, 4),
]


@pytest.mark.parametrize(("text", "expected", "mod16", "mod100", "mod7"), KNOWN)
def test_stable_hash_and_shards_match_the_published_values(
    text: str, expected: int, mod16: int, mod100: int, mod7: int
) -> None:
    assert stable_hash(text) == expected
    assert (shard_of(text, 16), shard_of(text, 100), shard_of(text, 7)) == (mod16, mod100, mod7)
    assert shard_of(text, 1) == 0


@pytest.mark.parametrize("count", [0, -1])
def test_shard_of_refuses_a_count_below_one(count: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        shard_of("sensor-a", count)


def _run(code: str, **env: str) -> str:
    # -I would drop PYTHONPATH; -S is not used so the venv's site-packages stay visible.
    full_env = {**os.environ, "PYTHONPATH": str(FUNCTIONS_DIR), **env}
    done = subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, "-c", code], env=full_env, capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


SHARDS_CODE = """
import json
from keydesign import shard_of
names = ["sensor-alpha-001", "sensor-0001", "hot-1", "ümlaut", "ev-42"]
print(json.dumps({"shards": [shard_of(n, 16) for n in names], "builtin": [hash(n) for n in names]}))
"""


def test_other_processes_with_other_hash_seeds_compute_the_same_shards() -> None:
    # Given two interpreters whose built-in str hash is salted differently
    first = json.loads(_run(SHARDS_CODE, PYTHONHASHSEED="1"))
    second = json.loads(_run(SHARDS_CODE, PYTHONHASHSEED="4242"))
    # Then the built-in hash differs (so the test can tell), but the shards do not
    assert first["builtin"] != second["builtin"]
    assert first["shards"] == second["shards"] == [13, 13, 2, 12, 15]


def test_importing_keydesign_imports_no_aws_sdk() -> None:
    loaded = json.loads(
        _run(
            "import json, sys, keydesign, keydesign.capacity, keydesign.items, keydesign.layouts\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {'boto3', 'botocore', 'moto'})))"
        )
    )
    assert loaded == []
    # ... and the check itself can see such a module when one is imported.
    assert json.loads(_run("import json, sys, keydesign, botocore\nprint(json.dumps('botocore' in sys.modules))"))
