"""``python -m keepmem_client.hooks``: the same as ``keepmem-hook``."""

import sys

from keepmem_client.hooks.cli import main

sys.exit(main())
