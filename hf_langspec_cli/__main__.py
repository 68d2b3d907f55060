"""`python -m hf_langspec_cli`: the `hf-langspec` command."""

import sys

from . import main

sys.exit(main())
