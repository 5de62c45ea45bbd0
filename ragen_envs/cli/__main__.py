import sys

from ragen_envs.cli import main

sys.exit(main())
