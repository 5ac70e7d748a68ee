# NOT CAUGHT, by design: the attribute name is computed, so no static check can tell that this
# calls __import__ (and treating every getattr with a computed name as an import would refuse
# ordinary code). The policy is defence in depth; the sandbox's isolation is the boundary and
# must contain whatever this module can do.
imp = getattr(__builtins__, '__imp' + 'ort__')
os = imp('os')
