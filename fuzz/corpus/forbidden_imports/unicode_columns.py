# Columns count characters, not bytes: `os` starts at column 20 (byte 27) after the non-ASCII string.
s = "日本語é"; import os
