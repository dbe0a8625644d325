"""The `verify` command line: main.py is the door, args.py what the commands share, cmd_<name>.py one per command."""
