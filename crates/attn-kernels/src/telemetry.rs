//! SM clock and temperature, read with `nvidia-smi`, so that a throttled run can be flagged.

use std::process::Command;

/// One reading of the GPU's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClockReading {
    /// Current SM clock, MHz.
    pub sm_mhz: u32,
    /// Temperature, °C.
    pub temp_c: u32,
}

/// Reads GPU `ordinal`'s SM clock and temperature; `None` where nvidia-smi is missing or says
/// nothing usable (the caller records the absence).
pub fn read_clocks(ordinal: usize) -> Option<ClockReading> {
    let output = Command::new("nvidia-smi")
        .args([
            "--query-gpu=clocks.sm,temperature.gpu",
            "--format=csv,noheader,nounits",
        ])
        .arg(format!("--id={ordinal}"))
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    parse_clocks(&String::from_utf8_lossy(&output.stdout))
}

/// Parses `1980, 45`.
pub fn parse_clocks(text: &str) -> Option<ClockReading> {
    let mut fields = text
        .lines()
        .next()?
        .split(',')
        .map(|f| f.trim().parse::<u32>());
    Some(ClockReading {
        sm_mhz: fields.next()?.ok()?,
        temp_c: fields.next()?.ok()?,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_nvidia_smi_csv() {
        assert_eq!(
            super::parse_clocks("1980, 45\n"),
            Some(super::ClockReading {
                sm_mhz: 1980,
                temp_c: 45
            })
        );
        assert_eq!(super::parse_clocks("[N/A], 45\n"), None);
        assert_eq!(super::parse_clocks(""), None);
    }
}
