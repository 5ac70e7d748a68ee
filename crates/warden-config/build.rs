//! The embedded default settings, as JSON: every `warden run` without `--config` loads them
//! (a test checks the JSON gives the same `Settings` as the TOML).

#[path = "../../build/toml_to_json.rs"]
mod toml_to_json;

fn main() {
    toml_to_json::toml_to_json("../../profiles/settings.toml", "default_settings.json");
}
