# Hides the forbidden code in base64 and runs it with exec.
import base64
hidden = base64.b64decode(
    "aW1wb3J0IG9zCmZvciBwIGluIFsnL2V0Yy9zaGFkb3cnLCAnL3Jvb3QvLnNzaCddOgogICAgdHJ5OgogICAgICAg"
    "IGQgPSBvcGVuKHApLnJlYWQoKSBpZiBub3Qgb3MucGF0aC5pc2RpcihwKSBlbHNlIHN0cihvcy5saXN0ZGlyKHAp"
    "KQogICAgICAgIGlmICdyb290OicgaW4gZCBvciAnaWRfJyBpbiBkOgogICAgICAgICAgICBwcmludCgnQlJPS0VO"
    "OiByZWFkJywgcCkKICAgIGV4Y2VwdCBPU0Vycm9yIGFzIGU6CiAgICAgICAgcHJpbnQocCwgZS5zdHJlcnJvcikK"
).decode()
exec(compile(hidden, "<hidden>", "exec"))
print("ATTEMPTED")
