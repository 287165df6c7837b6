
8
default$0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0train-0