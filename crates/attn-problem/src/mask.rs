//! The mask: a sliding [`Window`] and the attention [`Params`] (scale, causal, window).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::ProblemError;

/// A sliding (local) attention window, FlashAttention's definition: with `diag = i + S_kv − S_q`,
/// query row `i` sees keys `diag − left ≤ j ≤ diag + right`; `None` is unbounded on that side.
///
/// Serialized `{"left": L, "right": R}`, `null` for an unbounded side.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct Window {
    /// Keys before the diagonal a row may see.
    pub left: Option<usize>,
    /// Keys after the diagonal a row may see.
    pub right: Option<usize>,
}

impl Window {
    /// No window: every key (up to the causal mask).
    pub const NONE: Window = Window {
        left: None,
        right: None,
    };

    /// Whether either side is bounded.
    pub fn is_bounded(&self) -> bool {
        self.left.is_some() || self.right.is_some()
    }

    /// The ABI's pair `(window_left, window_right)`, `-1` for an unbounded side (kernels/README.md).
    pub fn abi(&self) -> (i32, i32) {
        let side = |s: Option<usize>| s.map_or(-1, |n| n.min(i32::MAX as usize) as i32);
        (side(self.left), side(self.right))
    }
}

/// `"L,R"`, `-1` for an unbounded side (FlashAttention's `window_size`).
impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = |s: Option<usize>| s.map_or("-1".to_string(), |n| n.to_string());
        write!(f, "{},{}", side(self.left), side(self.right))
    }
}

impl FromStr for Window {
    type Err = ProblemError;

    /// Parses `"L,R"` with `-1` (or `inf`) for an unbounded side.
    fn from_str(input: &str) -> Result<Window, ProblemError> {
        parse_window(input).map_err(|reason| ProblemError::ParseWindow {
            input: input.to_owned(),
            reason,
        })
    }
}

/// `L,R`, each a non-negative integer or `-1`/`inf` (unbounded); `Err` is one line. The one
/// grammar of a window, for [`Window`] and the `window=` word of [`crate::ShapeSpec`].
pub(crate) fn parse_window(text: &str) -> Result<Window, String> {
    let side = |t: &str| match t.trim() {
        "-1" | "inf" => Ok(None),
        t => t
            .parse::<usize>()
            .map(Some)
            .map_err(|_| format!("window side {t:?} is not a non-negative integer, -1 or inf")),
    };
    match text.split(',').collect::<Vec<_>>()[..] {
        [left, right] => Ok(Window {
            left: side(left)?,
            right: side(right)?,
        }),
        _ => Err("expected L,R (-1 for an unbounded side)".into()),
    }
}

/// The attention parameters besides the tensors: `O = softmax(scale · Q·Kᵀ + mask) · V`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// Multiplies the logits before the softmax; any finite value.
    pub scale: f64,
    /// Bottom-right aligned causal mask: query `i` sees keys `j ≤ i + S_kv − S_q`.
    pub causal: bool,
    /// A sliding window on top of the causal mask (causal is `right = 0`).
    #[serde(default)]
    pub window: Window,
}

impl Params {
    /// The default scale `1/√D`, no window.
    pub fn new(head_dim: usize, causal: bool) -> Params {
        Params {
            scale: 1.0 / (head_dim as f64).sqrt(),
            causal,
            window: Window::NONE,
        }
    }

    /// The same parameters with another scale.
    pub fn with_scale(self, scale: f64) -> Params {
        Params { scale, ..self }
    }

    /// The same parameters with a sliding window.
    pub fn with_window(self, window: Window) -> Params {
        Params { window, ..self }
    }

    /// The ABI's `(window_left, window_right)` for sequences of at most `seq_q` queries and
    /// `seq_kv` keys: `-1` for an unbounded side, causal as `window_right = 0`, and each bound
    /// clipped to `seq_q + seq_kv` (a wider window sees the same keys) so that kernels' int32
    /// arithmetic on it cannot overflow.
    pub fn abi_window(&self, seq_q: usize, seq_kv: usize) -> (i32, i32) {
        let limit = (seq_q + seq_kv).min(i32::MAX as usize / 2);
        let side = |s: Option<usize>| s.map_or(-1, |n| n.min(limit) as i32);
        (side(self.window.left), side(self.right_bound()))
    }

    /// The right bound the mask applies: `Some(0)` when causal, else the window's.
    pub fn right_bound(&self) -> Option<usize> {
        if self.causal {
            Some(0)
        } else {
            self.window.right
        }
    }

    /// The keys query `row` may see, `lo..hi` within `0..S_kv` (empty for a fully masked row):
    /// with `diag = row + S_kv − S_q`, `diag − left ≤ j ≤ diag + right`, `right` 0 when causal.
    pub fn kv_range(&self, row: usize, seq_q: usize, seq_kv: usize) -> std::ops::Range<usize> {
        // diag may be negative: work in i128, where nothing here can overflow.
        let diag = row as i128 + seq_kv as i128 - seq_q as i128;
        let clip = |x: i128| x.clamp(0, seq_kv as i128) as usize;
        let lo = self.window.left.map_or(0, |l| clip(diag - l as i128));
        let hi = self
            .right_bound()
            .map_or(seq_kv, |r| clip(diag + 1 + r as i128));
        lo..hi.max(lo)
    }

    /// The exclusive end of the keys query `row` may see (see [`Params::kv_range`]).
    pub fn kv_end(&self, row: usize, seq_q: usize, seq_kv: usize) -> usize {
        self.kv_range(row, seq_q, seq_kv).end
    }

    /// The (query, key) pairs the mask lets through in one (batch, head): the exact count of the
    /// work a kernel that skips masked tiles must do.
    pub fn visible_pairs(&self, seq_q: usize, seq_kv: usize) -> u64 {
        (0..seq_q)
            .map(|row| self.kv_range(row, seq_q, seq_kv).len() as u64)
            .sum()
    }
}
