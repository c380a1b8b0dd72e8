import sys

try:
    from exactspec.cli import main
except KeyboardInterrupt:  # Ctrl-C while starting up: nothing to keep, no traceback
    sys.exit(130)

sys.exit(main())
