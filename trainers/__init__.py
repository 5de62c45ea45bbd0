"""RL trainers for LLM agents (PPO, GRPO, DAPO, Dr. GRPO) with SNR-aware filtering and MI logging."""
