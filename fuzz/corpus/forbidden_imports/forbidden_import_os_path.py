# A dotted import is checked by its top-level package: os is not allowed, so neither is os.path.
import math, os.path
