"""The learner: scores turns under the policy and takes optimizer steps on samples."""
