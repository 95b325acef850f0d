# cone: the CPU image both compose services run.
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
WORKDIR /app
# The CPU build of torch first, from PyTorch's CPU index: PyPI's default wheel pulls several GB of CUDA.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
COPY . .
RUN pip install .
EXPOSE 8000
CMD ["cone", "--help"]
