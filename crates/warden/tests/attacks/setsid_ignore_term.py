# A new session whose processes ignore SIGTERM and SIGHUP, outliving the timeout if they can.
import json, os, signal, sys, time
marker = json.load(sys.stdin)["marker"]
if os.fork() == 0:
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    os.execvp("bash", ["bash", "-c", f"trap '' TERM HUP INT; exec sleep {marker}"])
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("started", flush=True)
time.sleep(60)
