"""Write keepmem's OpenAPI document (as the app in this checkout serves it
at /openapi.json) to the file named, for ``npm run generate``.

The document does not depend on the settings, so the defaults do; the
staleness test (tests/test_ts_sdk.py) builds it the same way.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(out: str) -> None:
    from app.main import create_app
    from app.settings import Settings

    document = create_app(Settings()).openapi()
    Path(out).write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "openapi.json")
