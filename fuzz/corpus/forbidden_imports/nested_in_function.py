def helper():
    x = 1
    import subprocess
    return subprocess.run(["id"])
