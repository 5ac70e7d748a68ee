# NOT CAUGHT, by design: the executed code is only known at run time (base64 of "import os").
# base64 itself is allowed; exec of a computed string is not an import. Isolation is the
# boundary and must contain whatever the decoded code does.
import base64

exec(base64.b64decode("aW1wb3J0IG9z"))
