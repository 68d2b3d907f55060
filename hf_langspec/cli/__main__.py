"""`python -m hf_langspec.cli`: the `hf-langspec` command."""

import sys

from hf_langspec_cli import main

sys.exit(main())
