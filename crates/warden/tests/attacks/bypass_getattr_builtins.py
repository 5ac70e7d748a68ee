# Reaches __import__ through getattr on the builtins with a built name, then the network.
import json
b = __builtins__ if isinstance(__builtins__, dict) else vars(__builtins__)
imp = b['__imp' + 'ort__']
imp2 = getattr(__builtins__, '__imp' + 'ort__', None) or imp
socket = imp2('soc' + 'ket')
try:
    socket.create_connection(("169.254.169.254", 80), timeout=2)
    print("BROKEN: reached the metadata address")
except OSError as e:
    print("metadata", type(e).__name__)
sub = imp('sub' + 'process')
try:
    out = sub.run(['cat', '/etc/shadow'], capture_output=True, text=True).stdout
    if "root:" in out:
        print("BROKEN: read /etc/shadow")
    print("cat", len(out))
except OSError as e:
    print("subprocess", e.strerror)
print("ATTEMPTED")
