//! The version of each runtime's interpreter, as Piston's API reports it: asked from the
//! interpreter itself (`--version`) the first time, then remembered. The sandbox binds the same
//! host binaries, so the host's answer is the sandbox's.

use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Mutex;
use warden_config::Settings;

#[derive(Debug, Clone)]
pub struct Versions {
    commands: Arc<HashMap<String, String>>,
    known: Arc<Mutex<HashMap<String, String>>>,
}

impl Versions {
    pub fn new(settings: &Settings) -> Versions {
        let commands = settings
            .sandbox
            .runtimes
            .iter()
            .map(|(lang, rt)| (lang.clone(), rt.command[0].clone()))
            .collect();
        Versions {
            commands: Arc::new(commands),
            known: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// "3.11.2" for `Python 3.11.2`, "20.19.2" for `v20.19.2`; "*" when it can't be told.
    pub async fn version_of(&self, language: &str) -> String {
        if let Some(v) = self.known.lock().await.get(language) {
            return v.clone();
        }
        let version = match self.commands.get(language) {
            Some(cmd) => ask(cmd).await.unwrap_or_else(|| "*".into()),
            None => "*".into(),
        };
        self.known
            .lock()
            .await
            .insert(language.to_owned(), version.clone());
        version
    }
}

async fn ask(command: &str) -> Option<String> {
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        tokio::process::Command::new(command)
            .arg("--version")
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .output(),
    )
    .await
    .ok()?
    .ok()?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    parse_version(&text)
}

/// The first dotted number in a `--version` answer.
pub fn parse_version(text: &str) -> Option<String> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .find(|w| w.contains('.') && w.starts_with(|c: char| c.is_ascii_digit()))
        .map(|w| w.trim_end_matches('.').to_owned())
}

#[cfg(test)]
mod tests {
    use super::parse_version;

    #[test]
    fn versions_are_read_from_version_banners() {
        assert_eq!(parse_version("Python 3.11.2\n").as_deref(), Some("3.11.2"));
        assert_eq!(parse_version("v20.19.2\n").as_deref(), Some("20.19.2"));
        assert_eq!(
            parse_version("GNU bash, version 5.2.15(1)-release (x86_64-pc-linux-gnu)").as_deref(),
            Some("5.2.15")
        );
        assert_eq!(parse_version("no numbers"), None);
    }
}
