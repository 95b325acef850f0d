# cone: the CPU image both compose services run. The wheel is built in one stage and installed in the
# next, the same install path tests/test_install.py checks (the reference checkpoints are in the wheel).
FROM python:3.11-slim AS wheel
WORKDIR /src
COPY . .
RUN pip wheel --no-deps --wheel-dir /dist .

FROM python:3.11-slim
ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
# The CPU build of torch first, from PyTorch's CPU index: PyPI's default wheel pulls several GB of CUDA.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
COPY --from=wheel /dist /dist
RUN pip install /dist/cone-*.whl && rm -rf /dist
WORKDIR /var/lib/cone
EXPOSE 8000
CMD ["cone", "--help"]
