from django.urls import path
from signups import views

urlpatterns = [
    path("signup/", views.signup),
]
