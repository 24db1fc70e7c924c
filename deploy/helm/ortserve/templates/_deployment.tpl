{{/*
A track's ConfigMap and Deployment: (dict "root" $ "track" "stable"|"canary").
The stable one is RELEASE(-ortserve); the canary RELEASE(-ortserve)-canary, with its own image
and config. Both carry the selector labels, so the Service sends requests to both.
*/}}
{{- define "ortserve.track" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- $canary := eq .track "canary" -}}
{{- $name := include "ortserve.fullname" $root -}}
{{- if $canary }}{{ $name = printf "%s-canary" $name }}{{ end -}}
{{- $config := include "ortserve.serveConfig" (dict "root" $root "extra" (ternary $v.canary.config (dict) $canary)) -}}
{{- $emptyDir := has $v.models.source (list "image" "download") -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ $name }}
  labels:
    {{- include "ortserve.labels" $root | nindent 4 }}
    ortserve.dev/track: {{ .track }}
data:
  serve.yaml: |
    {{- $config | nindent 4 }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  labels:
    {{- include "ortserve.labels" $root | nindent 4 }}
    ortserve.dev/track: {{ .track }}
spec:
  {{- if $canary }}
  replicas: {{ int $v.canary.replicas }}
  {{- else if not (or $v.autoscaling.enabled $v.keda.enabled) }}
  replicas: {{ int $v.replicaCount }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "ortserve.selectorLabels" $root | nindent 6 }}
      ortserve.dev/track: {{ .track }}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 25%
      maxUnavailable: 0
  template:
    metadata:
      labels:
        {{- include "ortserve.selectorLabels" $root | nindent 8 }}
        ortserve.dev/track: {{ .track }}
        {{- with $v.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        checksum/config: {{ $config | sha256sum }}
        {{- with $v.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      terminationGracePeriodSeconds: {{ int $v.shutdown.terminationGracePeriodSeconds }}
      {{- with $v.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      securityContext:
        {{- toYaml $v.podSecurityContext | nindent 8 }}
      {{- if eq $v.models.source "image" }}
      initContainers:
        - name: models
          image: {{ printf "%s:%s" $v.models.image.repository ($v.models.image.tag | default "latest") }}
          imagePullPolicy: {{ $v.models.image.pullPolicy }}
          # The emptyDir is mounted aside, not over the image's own copy at models.image.path.
          command: ["cp", "-R", "{{ trimSuffix "/" $v.models.image.path }}/.", "/models-out/"]
          securityContext:
            {{- toYaml $v.securityContext | nindent 12 }}
          volumeMounts:
            - name: models
              mountPath: /models-out
      {{- else if eq $v.models.source "download" }}
      initContainers:
        - name: models
          image: {{ $v.models.download.image }}
          command:
            {{- toYaml $v.models.download.command | nindent 12 }}
          {{- with $v.models.download.env }}
          env:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            {{- toYaml $v.securityContext | nindent 12 }}
          volumeMounts:
            - name: models
              mountPath: /models
            - name: tmp
              mountPath: /tmp
      {{- end }}
      containers:
        - name: ortserve
          image: {{ include "ortserve.image" (dict "root" $root "canary" $canary) }}
          imagePullPolicy: {{ $v.image.pullPolicy }}
          args: ["--config", "/etc/ortserve/config/serve.yaml"]
          env:
            # The image's ORTSERVE_ADDR would override the file's listen: set it here.
            - name: ORTSERVE_ADDR
              value: {{ printf "0.0.0.0:%d" (int $v.containerPort) | quote }}
          ports:
            - name: http
              containerPort: {{ int $v.containerPort }}
              protocol: TCP
          startupProbe:
            httpGet:
              path: /v2/health/live
              port: http
            periodSeconds: {{ int $v.probes.startup.periodSeconds }}
            failureThreshold: {{ int $v.probes.startup.failureThreshold }}
          livenessProbe:
            httpGet:
              path: /v2/health/live
              port: http
            periodSeconds: {{ int $v.probes.liveness.periodSeconds }}
            timeoutSeconds: {{ int $v.probes.liveness.timeoutSeconds }}
            failureThreshold: {{ int $v.probes.liveness.failureThreshold }}
          readinessProbe:
            httpGet:
              path: /health
              port: http
            periodSeconds: {{ int $v.probes.readiness.periodSeconds }}
            timeoutSeconds: {{ int $v.probes.readiness.timeoutSeconds }}
            failureThreshold: {{ int $v.probes.readiness.failureThreshold }}
          resources:
            {{- $res := deepCopy ($v.resources | default dict) }}
            {{- if $v.gpu.enabled }}
            {{- $limits := $res.limits | default dict }}
            {{- $_ := set $limits "nvidia.com/gpu" (int $v.gpu.count) }}
            {{- $_ := set $res "limits" $limits }}
            {{- end }}
            {{- toYaml $res | nindent 12 }}
          securityContext:
            {{- toYaml $v.securityContext | nindent 12 }}
          volumeMounts:
            - name: config
              mountPath: /etc/ortserve/config
              readOnly: true
            - name: tmp
              mountPath: /tmp
            {{- if ne $v.models.source "baked" }}
            - name: models
              mountPath: /models
              readOnly: true
              {{- with $v.models.pvc.subPath }}
              {{- if eq $v.models.source "pvc" }}
              subPath: {{ . }}
              {{- end }}
              {{- end }}
            {{- end }}
            {{- if $v.auth.existingSecret }}
            - name: auth
              mountPath: /etc/ortserve/auth
              readOnly: true
            {{- end }}
      volumes:
        - name: config
          configMap:
            name: {{ $name }}
        - name: tmp
          emptyDir:
            sizeLimit: 64Mi
        {{- if eq $v.models.source "pvc" }}
        - name: models
          persistentVolumeClaim:
            claimName: {{ $v.models.pvc.claimName }}
            readOnly: true
        {{- else if $emptyDir }}
        - name: models
          emptyDir:
            sizeLimit: {{ $v.models.sizeLimit }}
        {{- end }}
        {{- if $v.auth.existingSecret }}
        - name: auth
          secret:
            secretName: {{ $v.auth.existingSecret }}
            items:
              - key: {{ $v.auth.secretKey }}
                path: api-keys
        {{- end }}
      {{- $nodeSelector := merge (deepCopy ($v.nodeSelector | default dict)) (ternary ($v.gpu.nodeSelector | default (dict)) (dict) $v.gpu.enabled) }}
      {{- with $nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- $tolerations := concat ($v.tolerations | default list) (ternary ($v.gpu.tolerations | default (list)) (list) $v.gpu.enabled) }}
      {{- with $tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}
