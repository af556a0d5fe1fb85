"""The tuner: Optuna search of tile sizes with crash-isolated workers, resumable studies and tuned records."""
