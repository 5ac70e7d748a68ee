# Signals the daemon by its host pid (on stdin) and every process the sandbox can see
# except itself.
import json, os, signal, sys
daemon = json.load(sys.stdin)["daemon_pid"]
for sig in [signal.SIGSTOP, signal.SIGKILL]:
    try:
        os.kill(daemon, sig)
        print("signalled", daemon)
    except OSError as e:
        print("daemon", e.strerror)
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            os.kill(int(pid), signal.SIGSTOP)
            print("stopped", pid)
        except OSError as e:
            print(pid, e.strerror)
print("ATTEMPTED", flush=True)
