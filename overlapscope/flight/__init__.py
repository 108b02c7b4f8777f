"""Flight Recorder dumps."""
