"""`python -m hf_langspec.cli`: the same as `hf-langspec`."""

import sys

from . import main

sys.exit(main())
