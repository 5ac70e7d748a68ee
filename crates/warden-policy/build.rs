//! The checked-in default allow-list, as JSON: every run whose profile keeps the default list
//! loads it (its rules are still checked when it is loaded).

#[path = "../../build/toml_to_json.rs"]
mod toml_to_json;

fn main() {
    toml_to_json::toml_to_json(
        "data/default_allowed_modules.toml",
        "default_allowed_modules.json",
    );
}
