//! The `forbidden_imports` policy: Python code may import only the modules of the profile's
//! allow-list.
//!
//! The code is parsed with `ruff_python_parser` and the whole tree is walked (the private
//! `collect` module lists exactly what counts as an import: `import` and `from … import`
//! statements, calls of `__import__` and `importlib.import_module` by any recognisable name, and
//! the same inside string literals passed to `exec`, `eval` or `compile`). For each import, the
//! module must be allowed by `allowed_modules`: an entry `a` allows `a` and every `a.*`, an entry
//! `a.b` allows `a.b` and its children only. The first import in source order that is not allowed is the
//! violation, with its 1-based line and column (in characters).
//!
//! Invariants and scope:
//! - Only Python is checked (the language `python`, or `python` followed by a version such as
//!   `python3` or `python3.12`); code in any other language passes, unparsed.
//! - Code that does not parse is refused with a `syntax_error` violation carrying the parser's
//!   message and position: it could not run anyway, and it cannot be checked. So is code that
//!   CPython refuses before parsing (more than 200 nested brackets or 150 nested f-strings) and
//!   code too large or too deeply nested to parse safely (without a position).
//! - Any input is checked without crashing the process: deep nesting is parsed, walked and dropped
//!   on stacks grown to fit (see the private `collect` module).
//! - Relative imports (`from . import x`, `from .m import y`) are allowed: they name the user's
//!   own files in the sandbox's workspace, never an installed package.
//! - `importlib`, `builtins` and `ctypes` are modules like any other: importing them is refused
//!   only because the default list leaves them out. A profile that allows `importlib` allows its
//!   `import_module`, whose argument is then checked like an `import` statement.
//! - Strict mode: an import call whose module is known only at run time (`__import__("o" + "s")`,
//!   `importlib.import_module(name)`) is a `dynamic_import` violation. Outside strict mode it
//!   passes.
//! - This is defence in depth, never the boundary. A static check cannot follow every way Python
//!   reaches the import machinery — `getattr(__builtins__, "__imp" + "ort__")`, `exec` of a
//!   decoded string, `__loader__.load_module(...)`, objects reached through `__subclasses__()` —
//!   and does not try: the sandbox's isolation contains what such code can do.

mod allow_list;
mod collect;

use crate::line_index::LineIndex;
use crate::settings::ForbiddenImportsSettings;
use crate::{Policy, PolicyInput, Violation, ViolationKind};

use allow_list::{AllowList, is_valid_module_name};
pub use allow_list::{AllowListError, AllowedModule, default_allowed_modules, parse_allow_list};
use collect::{Dynamic, Finding, Unparseable, What};

/// The policy's name in `enabled_policies`.
pub const NAME: &str = "forbidden_imports";

/// Invalid `forbidden_imports` settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForbiddenImportsError {
    #[error(
        "invalid module name {name:?} in allowed_modules: expected a dotted python module name such as \"numpy\" or \"os.path\""
    )]
    InvalidAllowedModule { name: String },
}

/// Refuses Python code that imports a module outside the allow-list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForbiddenImports {
    allowed: AllowList,
    strict: bool,
}

impl ForbiddenImports {
    /// A policy allowing `settings.allowed_modules`; `strict` refuses dynamic imports too.
    pub fn new(
        settings: &ForbiddenImportsSettings,
        strict: bool,
    ) -> Result<Self, ForbiddenImportsError> {
        if let Some(name) = settings
            .allowed_modules
            .iter()
            .find(|name| !is_valid_module_name(name))
        {
            return Err(ForbiddenImportsError::InvalidAllowedModule { name: name.clone() });
        }
        Ok(Self {
            allowed: AllowList::new(settings.allowed_modules.iter().cloned()),
            strict,
        })
    }

    fn violation(
        &self,
        index: &LineIndex<'_>,
        offset: usize,
        kind: ViolationKind,
        message: String,
    ) -> Violation {
        let (line, column) = index.line_column(offset);
        Violation {
            policy: NAME,
            kind,
            message,
            line: Some(line),
            column: Some(column),
        }
    }

    /// The violation `finding` is under this policy's settings, if any.
    fn judge(&self, index: &LineIndex<'_>, finding: Finding) -> Option<Violation> {
        let inside = finding
            .inside
            .map(|function| format!(" in the string passed to {function}"))
            .unwrap_or_default();
        match finding.what {
            What::Module { module, submodules } => {
                let allowed = self.allowed.allows(&module)
                    || (!submodules.is_empty()
                        && submodules.iter().all(|sub| self.allowed.allows(sub)));
                if allowed {
                    return None;
                }
                let top = module.split('.').next().unwrap_or(&module);
                let message = if top == module {
                    format!(
                        "import of {module:?}{inside} is not allowed by the profile's allowed_modules"
                    )
                } else {
                    format!(
                        "import of {module:?}{inside} is not allowed: {top:?} is not in the profile's allowed_modules"
                    )
                };
                let kind = ViolationKind::ForbiddenImport { module };
                Some(self.violation(index, finding.offset, kind, message))
            }
            What::Dynamic { function, why } => {
                if !self.strict {
                    return None;
                }
                let function = function.as_str();
                let why = match why {
                    Dynamic::Name => {
                        format!("the module name passed to {function} is not a string literal")
                    }
                    Dynamic::Level => {
                        format!("the level passed to {function} is not an integer literal")
                    }
                    Dynamic::Globals => format!(
                        "a relative {function} with explicit globals resolves against a package known only at run time"
                    ),
                    Dynamic::Package => format!(
                        "the package passed to {function} for a relative name is not a string literal"
                    ),
                };
                let message = format!("dynamic import{inside} refused in strict mode: {why}");
                Some(self.violation(index, finding.offset, ViolationKind::DynamicImport, message))
            }
        }
    }
}

impl Policy for ForbiddenImports {
    fn name(&self) -> &'static str {
        NAME
    }

    fn check(&self, input: &PolicyInput<'_>) -> Result<(), Violation> {
        if !is_python(input.language.as_str()) {
            return Ok(());
        }
        let index = LineIndex::new(input.code);
        let parsed = match collect::parse(input.code) {
            Ok(parsed) => parsed,
            Err(unparseable) => {
                let message = match unparseable {
                    Unparseable::NestedBrackets => {
                        "syntax error: too many nested parentheses (python allows 200)".to_owned()
                    }
                    Unparseable::NestedFStrings => {
                        "syntax error: too many nested f-strings (python allows 150)".to_owned()
                    }
                    Unparseable::StackNeeded { bytes, lambdas } => format!(
                        "code too large or too deeply nested to check ({bytes} bytes, {lambdas} lambdas)"
                    ),
                };
                return Err(Violation {
                    policy: NAME,
                    kind: ViolationKind::SyntaxError,
                    message,
                    line: None,
                    column: None,
                });
            }
        };
        // Walked even when it does not parse: the walk measures the depth the drop needs.
        let collected = collect::collect(&parsed.syntax().body);
        let syntax_error = parsed
            .errors()
            .iter()
            .min_by_key(|error| error.location.start())
            .map(|error| (error.location.start().to_usize(), error.error.to_string()));
        collect::drop_tree(parsed, collected.depth);
        if let Some((offset, error)) = syntax_error {
            let message = format!("syntax error: {error}");
            return Err(self.violation(&index, offset, ViolationKind::SyntaxError, message));
        }
        match collected
            .findings
            .into_iter()
            .find_map(|finding| self.judge(&index, finding))
        {
            Some(violation) => Err(violation),
            None => Ok(()),
        }
    }
}

/// `python`, `python3`, `python3.12`: the languages this policy understands.
pub fn is_python(language: &str) -> bool {
    language
        .strip_prefix("python")
        .is_some_and(|version| version.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Requested;
    use std::time::Duration;
    use warden_types::Language;

    fn policy(allowed: &[&str], strict: bool) -> ForbiddenImports {
        let settings = ForbiddenImportsSettings {
            allowed_modules: allowed.iter().map(|&name| name.to_owned()).collect(),
        };
        ForbiddenImports::new(&settings, strict).unwrap()
    }

    fn check_as(policy: &ForbiddenImports, language: &str, code: &str) -> Result<(), Violation> {
        let language = Language::new(language).unwrap();
        policy.check(&PolicyInput {
            code,
            language: &language,
            requested: Requested {
                timeout: Duration::from_secs(1),
                memory_mb: 1,
            },
        })
    }

    fn check(policy: &ForbiddenImports, code: &str) -> Result<(), Violation> {
        check_as(policy, "python", code)
    }

    #[test]
    fn allowed_imports_pass() {
        let policy = policy(&["math", "numpy"], true);
        assert_eq!(
            check(&policy, "import math\nimport numpy.linalg as la\n"),
            Ok(())
        );
        assert_eq!(check(&policy, "from numpy import array\n"), Ok(()));
        assert_eq!(check(&policy, "from . import helper\n"), Ok(()));
    }

    #[test]
    fn a_forbidden_import_names_module_line_and_column() {
        let violation = check(
            &policy(&["math"], true),
            "import math\nx = 1; import os.path\n",
        )
        .unwrap_err();
        assert_eq!(violation.policy, "forbidden_imports");
        assert_eq!(
            violation.kind,
            ViolationKind::ForbiddenImport {
                module: "os.path".into()
            }
        );
        assert_eq!((violation.line, violation.column), (Some(2), Some(15)));
        assert_eq!(
            violation.message,
            "import of \"os.path\" is not allowed: \"os\" is not in the profile's allowed_modules"
        );
    }

    #[test]
    fn the_first_in_source_order_wins() {
        let code = "def f():\n    import socket\nimport os\n";
        let violation = check(&policy(&[], true), code).unwrap_err();
        assert_eq!(
            violation.kind,
            ViolationKind::ForbiddenImport {
                module: "socket".into()
            }
        );
        assert_eq!((violation.line, violation.column), (Some(2), Some(12)));
    }

    #[test]
    fn dotted_entries_allow_only_their_subtree() {
        let policy = policy(&["os.path"], true);
        assert_eq!(check(&policy, "import os.path\n"), Ok(()));
        assert_eq!(check(&policy, "from os.path import join\n"), Ok(()));
        // `from os import path` imports the submodule `os.path`.
        assert_eq!(check(&policy, "from os import path\n"), Ok(()));
        assert!(check(&policy, "from os import path, environ\n").is_err());
        assert!(check(&policy, "import os\n").is_err());
        assert!(check(&policy, "from os import *\n").is_err());
    }

    #[test]
    fn strict_mode_decides_dynamic_imports() {
        let code = "name = 'o' + 's'\n__import__(name)\n";
        assert_eq!(check(&policy(&[], false), code), Ok(()));
        let violation = check(&policy(&[], true), code).unwrap_err();
        assert_eq!(violation.kind, ViolationKind::DynamicImport);
        assert_eq!((violation.line, violation.column), (Some(2), Some(12)));
        assert_eq!(
            violation.message,
            "dynamic import refused in strict mode: the module name passed to __import__ is not a string literal"
        );
        // A literal name is checked in both modes.
        assert!(check(&policy(&[], false), "__import__('os')\n").is_err());
    }

    #[test]
    fn importlib_is_only_a_module() {
        let code = "import importlib\nimportlib.import_module('math')\n";
        let violation = check(&policy(&["math"], true), code).unwrap_err();
        assert_eq!(
            violation.kind,
            ViolationKind::ForbiddenImport {
                module: "importlib".into()
            }
        );
        let allowed = policy(&["math", "importlib"], true);
        assert_eq!(check(&allowed, code), Ok(()));
        let violation =
            check(&allowed, "import importlib as il\nil.import_module('os')\n").unwrap_err();
        assert_eq!(
            violation.kind,
            ViolationKind::ForbiddenImport {
                module: "os".into()
            }
        );
        assert_eq!((violation.line, violation.column), (Some(2), Some(18)));
        let code = "from importlib import import_module as im\nim('.path', 'os')\n";
        let violation = check(&allowed, code).unwrap_err();
        assert_eq!(
            violation.kind,
            ViolationKind::ForbiddenImport {
                module: "os.path".into()
            }
        );
    }

    #[test]
    fn exec_strings_report_at_the_string() {
        let violation = check(&policy(&[], true), "x = 1\nexec('import os')\n").unwrap_err();
        assert_eq!((violation.line, violation.column), (Some(2), Some(6)));
        assert_eq!(
            violation.message,
            "import of \"os\" in the string passed to exec is not allowed by the profile's allowed_modules"
        );
    }

    #[test]
    fn syntax_errors_are_violations_with_a_position() {
        let violation = check(&policy(&[], true), "x = 1\nprint((1, 2)\n").unwrap_err();
        assert_eq!(violation.kind, ViolationKind::SyntaxError);
        assert!(
            violation.message.starts_with("syntax error: "),
            "{}",
            violation.message
        );
        assert_eq!(violation.line, Some(3));
    }

    /// Runs `check` on a thread with a small stack, as a worst case for the caller's stack.
    fn check_on_small_stack(code: String) -> Result<(), Violation> {
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || check(&policy(&[], true), &code))
            .unwrap()
            .join()
            .unwrap()
    }

    #[test]
    fn deep_code_does_not_overflow_the_stack() {
        // Each would overflow a 256 KiB stack many times over in a plain recursive walk or drop.
        let n = 20_000;
        let deep = [
            format!("x = 1{}\n", "+1".repeat(n)),
            format!("x = {}1\n", "-".repeat(n)),
            format!("x = a{}\n", ".b".repeat(n)),
            format!("x = f{}\n", "()".repeat(n)),
            format!("x = {}1{}\n", "lambda a=".repeat(1000), ":1".repeat(1000)),
            format!("exec('x = {}1')\n", "-".repeat(n)),
        ];
        for code in deep {
            let prefix: String = code.chars().take(12).collect();
            let violation = check_on_small_stack(format!("{code}import os\n")).unwrap_err();
            assert_eq!(
                violation.kind,
                ViolationKind::ForbiddenImport {
                    module: "os".into()
                },
                "{prefix}"
            );
            let violation = check_on_small_stack(format!("{code}import os\n(\n")).unwrap_err();
            assert_eq!(violation.kind, ViolationKind::SyntaxError, "{prefix}");
        }
        // A string passed to exec that is deep and does not parse.
        let code = format!("exec('x = {}1(')\nimport os\n", "-".repeat(n));
        let violation = check_on_small_stack(code).unwrap_err();
        assert_eq!(
            violation.kind,
            ViolationKind::ForbiddenImport {
                module: "os".into()
            }
        );
    }

    #[test]
    fn nesting_limits_are_cpythons() {
        let policy = policy(&[], true);
        let parens = |n: usize| format!("x = {}1{}\n", "(".repeat(n), ")".repeat(n));
        assert_eq!(check(&policy, &parens(200)), Ok(()));
        let violation = check(&policy, &parens(201)).unwrap_err();
        assert_eq!(violation.kind, ViolationKind::SyntaxError);
        assert_eq!(
            violation.message,
            "syntax error: too many nested parentheses (python allows 200)"
        );
        assert_eq!((violation.line, violation.column), (None, None));

        let fstrings = |n: usize| format!("x = {}1{}\n", "f'{".repeat(n), "}'".repeat(n));
        assert_eq!(check(&policy, &fstrings(150)), Ok(()));
        let violation = check(&policy, &fstrings(151)).unwrap_err();
        assert_eq!(
            violation.message,
            "syntax error: too many nested f-strings (python allows 150)"
        );
        // Brackets inside strings and comments are not brackets.
        let code = format!("s = '{}'  # {}\n", "(".repeat(500), "[".repeat(500));
        assert_eq!(check(&policy, &code), Ok(()));
    }

    #[test]
    fn code_too_complex_to_parse_safely_is_refused() {
        let code = format!(
            "x = {}1{}\n",
            "lambda a=".repeat(70_000),
            ":1".repeat(70_000)
        );
        let violation = check(&policy(&[], true), &code).unwrap_err();
        assert_eq!(violation.kind, ViolationKind::SyntaxError);
        assert_eq!(
            violation.message,
            "code too large or too deeply nested to check (770006 bytes, 70000 lambdas)"
        );
    }

    #[test]
    fn other_languages_pass_unparsed() {
        let policy = policy(&[], true);
        assert_eq!(check_as(&policy, "javascript", "require('fs') ((("), Ok(()));
        assert_eq!(check_as(&policy, "bash", "import os"), Ok(()));
        assert_eq!(check_as(&policy, "pythonic", "import os"), Ok(()));
        assert!(check_as(&policy, "python3", "import os").is_err());
        assert!(check_as(&policy, "python3.12", "import os").is_err());
    }

    #[test]
    fn invalid_allowed_modules_are_errors() {
        let settings = ForbiddenImportsSettings {
            allowed_modules: vec!["math".into(), "os.*".into()],
        };
        let error = ForbiddenImports::new(&settings, true).unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid module name \"os.*\" in allowed_modules: expected a dotted python module name such as \"numpy\" or \"os.path\""
        );
    }
}
