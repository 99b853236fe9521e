//! The evidence schema: provenance, raw samples and verdicts that every command writes under evidence/.
