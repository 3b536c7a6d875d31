"""The application floor: the `electra` command, the Python API, `electra compare`, plots and the FLOP report."""
