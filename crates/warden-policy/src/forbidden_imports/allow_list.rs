//! The allow-list of importable modules, and the checked-in default one.
//!
//! Invariants: the default list is data (`data/default_allowed_modules.toml`), compiled into the
//! binary, with a non-empty reason on every entry, no duplicates and only valid dotted module
//! names; a test keeps it that way. Matching is by whole dotted components: the entry `a` allows
//! `a` and `a.b.c`, never `ab`; the entry `a.b` allows `a.b` and `a.b.c`, never `a` or `a.c`.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use serde::Deserialize;

/// The checked-in default allow-list, verbatim (what the build converted; see the test).
#[cfg(test)]
const DEFAULT_ALLOW_LIST: &str = include_str!("../../data/default_allowed_modules.toml");

/// One entry of an allow-list file: a module and why it is safe to allow.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowedModule {
    /// A dotted module name, `math` or `os.path`.
    pub name: String,
    /// Why code may import it.
    pub reason: String,
}

/// An allow-list file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllowListError {
    #[error("cannot parse the allow-list: {0}")]
    Parse(String),
    #[error("invalid module name {name:?} in the allow-list")]
    InvalidName { name: String },
    #[error("module {name:?} has no reason in the allow-list")]
    MissingReason { name: String },
    #[error("module {name:?} is listed twice in the allow-list")]
    Duplicate { name: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AllowListFile {
    module: Vec<AllowedModule>,
}

/// Parses and checks an allow-list file (the format of `data/default_allowed_modules.toml`).
pub fn parse_allow_list(text: &str) -> Result<Vec<AllowedModule>, AllowListError> {
    let file: AllowListFile =
        toml::from_str(text).map_err(|error| AllowListError::Parse(error.to_string()))?;
    check_allow_list(file)
}

/// The default list as the build converted it to JSON (see `build.rs`).
const DEFAULT_ALLOW_LIST_JSON: &str =
    include_str!(concat!(env!("OUT_DIR"), "/default_allowed_modules.json"));

/// [`parse_allow_list`] for the build's JSON form of the default list.
fn parse_allow_list_json(text: &str) -> Result<Vec<AllowedModule>, AllowListError> {
    let file: AllowListFile =
        serde_json::from_str(text).map_err(|error| AllowListError::Parse(error.to_string()))?;
    check_allow_list(file)
}

fn check_allow_list(file: AllowListFile) -> Result<Vec<AllowedModule>, AllowListError> {
    let mut seen = BTreeSet::new();
    for module in &file.module {
        if !is_valid_module_name(&module.name) {
            return Err(AllowListError::InvalidName {
                name: module.name.clone(),
            });
        }
        if module.reason.trim().is_empty() {
            return Err(AllowListError::MissingReason {
                name: module.name.clone(),
            });
        }
        if !seen.insert(module.name.as_str()) {
            return Err(AllowListError::Duplicate {
                name: module.name.clone(),
            });
        }
    }
    Ok(file.module)
}

/// The checked-in default allow-list, parsed once.
pub fn default_allowed_modules() -> &'static [AllowedModule] {
    static DEFAULT: OnceLock<Vec<AllowedModule>> = OnceLock::new();
    DEFAULT.get_or_init(|| {
        parse_allow_list_json(DEFAULT_ALLOW_LIST_JSON)
            .expect("the checked-in default allow-list is valid (see its unit test)")
    })
}

/// Whether `name` is a dotted Python module name: identifiers joined by single dots.
pub(crate) fn is_valid_module_name(name: &str) -> bool {
    name.split('.').all(|part| {
        let mut chars = part.chars();
        chars
            .next()
            .is_some_and(|first| first == '_' || first.is_alphabetic())
            && chars.all(|c| c == '_' || c.is_alphanumeric())
    })
}

/// A set of allowed module entries, matched by dotted prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AllowList {
    entries: BTreeSet<String>,
}

impl AllowList {
    pub(crate) fn new(entries: impl IntoIterator<Item = String>) -> Self {
        Self {
            entries: entries.into_iter().collect(),
        }
    }

    /// Whether `module` (dotted) is an entry or inside one.
    pub(crate) fn allows(&self, module: &str) -> bool {
        // Every dotted prefix of `module`, shortest first: `a`, `a.b`, `a.b.c`.
        let prefixes = module
            .match_indices('.')
            .map(|(dot, _)| &module[..dot])
            .chain([module]);
        prefixes
            .into_iter()
            .any(|prefix| self.entries.contains(prefix))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builds_json_form_is_the_checked_in_list() {
        assert_eq!(
            parse_allow_list_json(DEFAULT_ALLOW_LIST_JSON).unwrap(),
            parse_allow_list(DEFAULT_ALLOW_LIST).unwrap()
        );
    }

    #[test]
    fn the_default_list_is_valid_and_every_entry_has_a_reason() {
        let modules = default_allowed_modules();
        assert!(modules.len() > 40, "{}", modules.len());
        for module in modules {
            assert!(
                !module.reason.trim().is_empty(),
                "{} has no reason",
                module.name
            );
        }
        let names: Vec<&str> = modules.iter().map(|m| m.name.as_str()).collect();
        for expected in [
            "math",
            "json",
            "collections",
            "numpy",
            "pandas",
            "__future__",
        ] {
            assert!(names.contains(&expected), "{expected} missing");
        }
    }

    #[test]
    fn the_default_list_allows_nothing_that_reaches_the_system() {
        let list = AllowList::new(default_allowed_modules().iter().map(|m| m.name.clone()));
        for forbidden in [
            "os",
            "os.path",
            "sys",
            "subprocess",
            "socket",
            "shutil",
            "ctypes",
            "importlib",
            "importlib.util",
            "builtins",
            "pathlib",
            "multiprocessing",
            "threading",
            "signal",
            "pickle",
            "marshal",
            "posix",
            "_posixsubprocess",
            "urllib",
            "http",
            "asyncio",
            "tempfile",
            "runpy",
            "code",
        ] {
            assert!(!list.allows(forbidden), "{forbidden} is allowed by default");
        }
    }

    #[test]
    fn entries_match_by_whole_components() {
        let list = AllowList::new(["a".to_owned(), "x.y".to_owned()]);
        assert!(list.allows("a"));
        assert!(list.allows("a.b.c"));
        assert!(!list.allows("ab"));
        assert!(!list.allows("b.a"));
        assert!(list.allows("x.y"));
        assert!(list.allows("x.y.z"));
        assert!(!list.allows("x"));
        assert!(!list.allows("x.z"));
        assert!(!list.allows("x.yz"));
    }

    #[test]
    fn module_names_are_dotted_identifiers() {
        for valid in ["a", "os.path", "_x", "numpy", "π", "a1.b_2"] {
            assert!(is_valid_module_name(valid), "{valid}");
        }
        for invalid in ["", ".", "a.", ".a", "a..b", "1a", "a-b", "*", "a b", "os.*"] {
            assert!(!is_valid_module_name(invalid), "{invalid}");
        }
    }

    #[test]
    fn bad_files_are_refused() {
        let missing = "[[module]]\nname = \"a\"\nreason = \" \"\n";
        assert_eq!(
            parse_allow_list(missing),
            Err(AllowListError::MissingReason { name: "a".into() })
        );
        let twice =
            "[[module]]\nname = \"a\"\nreason = \"r\"\n[[module]]\nname = \"a\"\nreason = \"r\"\n";
        assert_eq!(
            parse_allow_list(twice),
            Err(AllowListError::Duplicate { name: "a".into() })
        );
        let bad = "[[module]]\nname = \"a b\"\nreason = \"r\"\n";
        assert_eq!(
            parse_allow_list(bad),
            Err(AllowListError::InvalidName { name: "a b".into() })
        );
        assert!(matches!(
            parse_allow_list("[[module]]\nname = \"a\"\n"),
            Err(AllowListError::Parse(_))
        ));
    }
}
