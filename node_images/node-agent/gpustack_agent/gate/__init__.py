"""The `gate` program: the validation gate's verdict and its polling Job."""
