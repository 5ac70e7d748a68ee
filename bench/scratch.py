"""Scratch folders for the benchmarks: a daemon's data directory (one per daemon: two daemons
never share one) that is removed when the script exits, whichever way it ends short of a
kill. The daemons are stopped before (each script's `finally`), so nothing holds them."""
import atexit, shutil, tempfile


def data_dir():
    folder = tempfile.mkdtemp(prefix="warden-bench-data-")
    atexit.register(shutil.rmtree, folder, True)
    return folder
