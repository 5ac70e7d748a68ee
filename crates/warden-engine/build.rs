//! Compiles the import guard (`src/import_guard/guard.py`) to CPython bytecode with the
//! `python3` on the build host's PATH, so that a sandbox's interpreter of the same version loads
//! it without compiling its source at every start (see `import_guard::bytecode`): an unchecked
//! hash-based `.pyc` and the interpreter's cache tag (its file name in `__pycache__`), with the
//! guard's functions already carrying its label as their file name. Without a
//! usable `python3` both outputs are empty and the guard is delivered as source only.

use std::path::Path;
use std::process::Command;

const COMPILE: &str = r#"
import importlib.util, marshal, re, sys
source = open(sys.argv[1], "rb").read()
code = compile(source, "guard.py", "exec", dont_inherit=True, optimize=0)
# The guard's functions carry its label as their file name; it relabels them at start unless
# they have it already. Labelled here, every code object inside `_install`, so that the
# sandbox's interpreter skips that work. The import machinery then renames only the code
# objects that still carry the compile-time name (the module's and its top-level functions').
label = re.search(rb'guard_filename = "([^"]+)"', source).group(1).decode()
def nested(c, f):
    return tuple(f(k) if type(k) is type(c) else k for k in c.co_consts)
def labelled(c):
    return c.replace(co_filename=label, co_consts=nested(c, labelled))
def install_labelled(c):
    return c.replace(co_consts=nested(c, labelled)) if c.co_name == "_install" else c
code = code.replace(co_consts=nested(code, install_labelled))
# Flags 1: hash-based, source not checked (PEP 552).
pyc = importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little") + importlib.util.source_hash(source) + marshal.dumps(code)
open(sys.argv[2], "wb").write(pyc)
print(sys.implementation.cache_tag)
"#;

fn main() {
    let guard = "src/import_guard/guard.py";
    println!("cargo:rerun-if-changed={guard}");
    println!("cargo:rerun-if-env-changed=PATH");
    let out = std::env::var("OUT_DIR").expect("OUT_DIR");
    let pyc = Path::new(&out).join("guard.pyc");
    let name = Path::new(&out).join("guard_cache_tag.txt");
    let run = Command::new("python3")
        .args(["-I", "-c", COMPILE, guard])
        .arg(&pyc)
        .output();
    let compiled = match run {
        Ok(o) if o.status.success() => String::from_utf8(o.stdout)
            .ok()
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
            .ok_or_else(|| "python3 named no cache tag".to_owned()),
        Ok(o) => Err(format!(
            "python3 failed: {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .last()
                .unwrap_or("")
        )),
        Err(e) => Err(format!("no python3 ({e})")),
    };
    match compiled {
        Ok(tag) => std::fs::write(&name, tag).expect("write the cache tag"),
        Err(why) => {
            println!(
                "cargo:warning=the import guard is not compiled, it is delivered as source only: {why}"
            );
            std::fs::write(&pyc, b"").expect("write an empty bytecode");
            std::fs::write(&name, "").expect("write an empty name");
        }
    }
}
