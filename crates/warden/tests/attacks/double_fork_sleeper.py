# A daemon the classic way (fork, setsid, fork) that sleeps past the run's timeout; the runner
# looks for its marker among the host's processes afterwards.
import json, os, sys, time
marker = json.load(sys.stdin)["marker"]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", marker])
    os._exit(0)
print("started", flush=True)
time.sleep(60)
