"""QMIX for communication topologies: the agent Q-network (GNN-GRU-MLP) and the mixer, the
replay buffer, the learner, the runners that play episodes (one at a time, in flight, on Ray
workers, or batched on the batch simulator), and training as a library call
(:mod:`learners.training`; ``python train_qmix.py`` is its command line).
"""
