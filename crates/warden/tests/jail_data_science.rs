//! The data_science profile runs a real analysis: a DataFrame, a computation, a plot, and the
//! PNG back as an artifact (numpy, pandas and matplotlib from Debian, installed by
//! scripts/setup.sh).

mod common;

#[test]
fn dataframe_compute_plot_png() {
    require_root!();
    let code = r#"
import numpy as np
import pandas as pd
import matplotlib.pyplot as plt
df = pd.DataFrame({"x": np.arange(10), "y": np.arange(10) ** 2})
print(df["y"].mean(), df["y"].sum())
fig, ax = plt.subplots()
ax.plot(df["x"], df["y"])
fig.savefig("output/plot.png")
df.to_csv("output/data.csv", index=False)
"#;
    let out = common::warden_cmd(
        &[
            "run",
            "--json",
            "--profile",
            "data_science",
            "-l",
            "python",
            "-",
        ],
        code,
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stdout"], "28.5 285\n", "{v:.500}");
    assert_eq!(v["reason"], "exited");
    let arts = v["artifacts"].as_array().unwrap();
    let png = arts
        .iter()
        .find(|a| a["name"] == "plot.png")
        .expect("no plot.png");
    assert_eq!(png["mime_type"], "image/png");
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(png["bytes"].as_str().unwrap())
        .unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert!(bytes.len() > 1000);
    let csv = arts.iter().find(|a| a["name"] == "data.csv").unwrap();
    assert_eq!(csv["mime_type"], "text/csv");
}
