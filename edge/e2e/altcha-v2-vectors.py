"""The PyPI `altcha` library's side of edge/src/proof/tests_v2.rs (ALTCHA proof of work v2):

1. it solves and verifies the edge's challenge of the npm vector (`PURCHASE_CHALLENGE`, which the
   edge issues byte for byte), with the vectors' secret as both HMAC secrets;
2. it prints a payload of a challenge it makes itself (deterministic mode, the edge's binding in
   `data`), which `solutions_of_the_pypi_librarys_challenges_verify_here` verifies.

    python3 -m venv /tmp/altcha-py && /tmp/altcha-py/bin/pip install altcha==2.3.0
    /tmp/altcha-py/bin/python edge/e2e/altcha-v2-vectors.py < the-edge-challenge.json
"""

import json
import sys

import altcha

KEY = "altcha-vector-secret-0123456789"
RAW = "" if sys.stdin.isatty() else sys.stdin.read()
EDGE = json.loads(RAW) if RAW.strip() else None

if EDGE is not None:
    challenge = altcha.Challenge.from_dict(EDGE)
    solution = altcha.solve_challenge(challenge)
    verdict = altcha.verify_solution(
        altcha.Payload(challenge, solution), KEY, hmac_key_secret=KEY
    )
    assert verdict.verified, verdict
    print(f"the edge's challenge: counter {solution.counter} found and verified", file=sys.stderr)

made = altcha.create_challenge(
    "PBKDF2/SHA-256",
    32,
    counter=1234,
    expires_at=1_800_000_000,
    data={"kid": "default", "purpose": "purchase", "sku": "SHOE-1", "user": "alice@shop:42", "issued": 1_799_999_877},
    hmac_secret=KEY,
    hmac_key_secret=KEY,
)
solution = altcha.solve_challenge(made)
solution.time = None
print(altcha.Payload(made, solution).to_base64())
