# Relative imports name the user's own files in the workspace: always allowed.
from . import helpers
from .utils import parse
from .. import sibling
from ..pkg.mod import thing
